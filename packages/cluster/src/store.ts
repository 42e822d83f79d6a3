/**
 * The contract between a member and the store that holds the records: a
 * few operations on names and opaque values, which a third party can
 * implement over any service with expiring keys and a way to follow
 * changes (Redis, Consul, Kubernetes). docs/cluster.md describes each
 * promise; `@tensorpipe/cluster/testing` has the suite that checks them.
 */
import type { TensorPipeError } from "@tensorpipe/core";

/** One record as the store holds it. */
export interface StoreRecord {
  /** The member's name, as claimed. */
  readonly name: string;
  /** What the member wrote (an encoded MemberRecord), opaque to the store. */
  readonly value: string;
}

/** A change to the records since the last snapshot. */
export type StoreChange = { readonly type: "put"; readonly name: string; readonly value: string } | { readonly type: "delete"; readonly name: string };

/** What a store tells a member that follows it. */
export interface StoreFollower {
  /** Every record, at first and again each time the store is reached after an outage. */
  snapshot(records: readonly StoreRecord[]): void;
  /** One change after the last snapshot, in the store's order. */
  change(change: StoreChange): void;
  /** The store cannot be reached; the last snapshot and changes still stand. Once per outage. */
  unavailable(error: TensorPipeError): void;
}

/** A name this member holds in the store, kept alive until released or lost. */
export interface StoreClaim {
  /** Writes `value` under the name. Rejects ERR_TP_UNAVAILABLE while the store cannot be reached. */
  update(value: string): Promise<void>;
  /** Removes the record at once and stops keeping it alive. Never rejects: a record it cannot remove expires. */
  release(): Promise<void>;
}

/** What a store tells the holder of a claim. */
export interface ClaimEvents {
  /**
   * The store no longer holds the record (its lease expired while the
   * store could not be reached, or the registry holding it went away and
   * a claim again failed). Called once; the member claims the name again
   * when it can.
   */
  lost(error: TensorPipeError): void;
  /**
   * Whether `value`, found under the name by a claim, is one this very
   * member wrote before (a record the service kept after the client gave
   * it up: etcd renews leases when it restarts). A store may then take the
   * name over in place, atomically, instead of refusing it.
   */
  isOwn?(value: string): boolean;
}

/** Where members' records are kept: etcd, the embedded registry, or a third party's. */
export interface ClusterStore {
  /** What it is and where, for messages: "etcd at http://10.0.0.1:2379, prefix /app/". */
  readonly description: string;
  /**
   * Writes `value` under `name` if no live member holds the name, and keeps
   * it alive. Rejects ERR_TP_NAME_TAKEN when one does, ERR_TP_UNAVAILABLE
   * when the store cannot be reached.
   */
  claim(name: string, value: string, events: ClaimEvents): Promise<StoreClaim>;
  /** Starts following the records; `stop()` ends it. */
  follow(follower: StoreFollower): { stop(): void };
  /** Releases what this store object holds (connections, timers). */
  close(): Promise<void>;
}
