/**
 * Records in etcd, as NVIDIA Dynamo and NIXL keep theirs: one key per
 * member under a prefix, bound to a lease of `ttl` seconds that the client
 * keeps alive; names claimed by a transaction on the key's creation
 * revision; the prefix read, then watched from the revision read. A member
 * that crashes or is cut off is removed by etcd when its lease expires.
 */
import { ErrorCode, TensorPipeError } from "@tensorpipe/core";
import { Etcd3, type IOptions, type Lease, type Namespace, type Watcher } from "etcd3";
import type { ClaimEvents, ClusterStore, StoreClaim, StoreFollower, StoreRecord } from "./store.js";

/** Options of etcdStore(). */
export interface EtcdStoreOptions {
  /** etcd's client URLs, e.g. ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]. */
  hosts: string | readonly string[];
  /** Prefix of every key, so that applications can share one etcd. Default "/tensorpipe/cluster/"; it should end with "/". */
  prefix?: string | undefined;
  /** Seconds a member's record lives without a keep-alive: how long a crashed member stays listed. Default 10, at least 2. */
  ttl?: number | undefined;
  /** Milliseconds one request to etcd may take before the store counts as unreachable. Default 5000. */
  requestTimeout?: number | undefined;
  /** etcd user and password, where etcd has authentication on. */
  auth?: IOptions["auth"];
  /** TLS credentials for https hosts. */
  credentials?: IOptions["credentials"];
}

const DEFAULT_PREFIX = "/tensorpipe/cluster/";
/** Between tries to read the prefix again while etcd cannot be reached. */
const RESYNC_DELAY_MS = 500;

function invalid(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.INVALID_ARG, `etcdStore(): ${message}`);
}

/** A ClusterStore on etcd (v3 API, through the etcd3 client). */
export function etcdStore(options: EtcdStoreOptions): ClusterStore {
  return new EtcdStore(options);
}

class EtcdStore implements ClusterStore {
  readonly description: string;
  private readonly client: Etcd3;
  private readonly ns: Namespace;
  private readonly ttl: number;
  private readonly timeout: number;
  private closed = false;

  constructor(options: EtcdStoreOptions) {
    if (typeof options !== "object" || options === null) throw invalid("options { hosts } are missing");
    const hosts = typeof options.hosts === "string" ? [options.hosts] : options.hosts;
    if (!Array.isArray(hosts) || hosts.length === 0 || hosts.some((h) => typeof h !== "string" || !/^https?:\/\//.test(h))) {
      throw invalid('hosts must be etcd client URLs, like "http://127.0.0.1:2379"');
    }
    const prefix = options.prefix ?? DEFAULT_PREFIX;
    if (typeof prefix !== "string" || prefix.length === 0) throw invalid('prefix must be a non-empty string, like "/myapp/members/"');
    this.ttl = options.ttl ?? 10;
    if (!Number.isInteger(this.ttl) || this.ttl < 2) throw invalid(`ttl must be a whole number of seconds >= 2, not ${String(options.ttl)}`);
    this.timeout = options.requestTimeout ?? 5_000;
    if (!Number.isFinite(this.timeout) || this.timeout <= 0) throw invalid(`requestTimeout must be milliseconds > 0, not ${String(options.requestTimeout)}`);
    this.description = `etcd at ${hosts.join(", ")}, prefix ${prefix}`;
    this.client = new Etcd3({
      hosts: [...hosts],
      auth: options.auth,
      credentials: options.credentials,
      dialTimeout: this.timeout,
      defaultCallOptions: (c) => (c.isStream ? {} : { deadline: Date.now() + this.timeout }),
      // A cut-off etcd is noticed by the watch stream within seconds, not by TCP's own timeouts.
      grpcOptions: { "grpc.keepalive_time_ms": 2_000, "grpc.keepalive_timeout_ms": 2_000, "grpc.keepalive_permit_without_calls": 1 },
    });
    this.ns = this.client.namespace(prefix);
  }

  private unreachable(e: unknown, doing: string): TensorPipeError {
    if (e instanceof TensorPipeError) return e;
    return new TensorPipeError(ErrorCode.UNAVAILABLE, `${this.description} cannot be reached (${doing}): ${(e as Error)?.message ?? String(e)}`, {
      cause: e,
    });
  }

  async claim(name: string, value: string, events: ClaimEvents): Promise<StoreClaim> {
    if (this.closed) throw new TensorPipeError(ErrorCode.CLOSED, `${this.description}: the store was closed`);
    const lease: Lease = this.ns.lease(this.ttl, { autoKeepAlive: true });
    let leaseId: string;
    try {
      leaseId = await lease.grant();
      const result = await this.ns.if(name, "Create", "==", 0).then(this.ns.put(name).value(value).lease(leaseId)).commit();
      if (!result.succeeded) {
        const holder = await this.ns
          .get(name)
          .string()
          .catch(() => null);
        throw new TensorPipeError(
          ErrorCode.NAME_TAKEN,
          `the name "${name}" is held by a live member in ${this.description}${holder ? ` (its record: ${holder.slice(0, 300)})` : ""}: choose another name, or wait for its lease (${this.ttl} s) to expire if that member is gone`,
        );
      }
    } catch (e) {
      lease.release();
      await lease.revoke().catch(() => undefined);
      throw this.unreachable(e, `claiming "${name}"`);
    }
    let released = false;
    lease.on("lost", (e) => {
      if (released) return;
      released = true;
      events.lost(new TensorPipeError(ErrorCode.UNAVAILABLE, `the lease of "${name}" in ${this.description} was lost: ${e.message}`, { cause: e }));
    });
    return {
      update: async (v) => {
        try {
          await this.ns.put(name).value(v).lease(leaseId);
        } catch (e) {
          throw this.unreachable(e, `updating "${name}"`);
        }
      },
      release: async () => {
        if (released) return;
        released = true;
        // Revoking the lease deletes the record; if etcd cannot be reached it expires instead.
        await lease.revoke().catch(() => lease.release());
      },
    };
  }

  follow(follower: StoreFollower): { stop(): void } {
    let stopped = false;
    let watcher: Watcher | undefined;
    let revision = 0n;
    let syncing = false;
    let retry: NodeJS.Timeout | undefined;
    let down = false;
    const unavailable = (e: unknown, doing: string) => {
      if (stopped || down) return;
      down = true;
      follower.unavailable(this.unreachable(e, doing));
    };
    const sync = async (): Promise<void> => {
      if (stopped || syncing) return;
      syncing = true;
      try {
        const res = await this.ns.getAll().exec();
        if (stopped) return;
        revision = BigInt(res.header.revision);
        const records: StoreRecord[] = res.kvs.map((kv) => ({ name: kv.key.toString(), value: kv.value.toString() }));
        down = false;
        follower.snapshot(records);
        if (!watcher)
          watcher = await this.watch(
            revision + 1n,
            (r) => r > revision,
            follower,
            unavailable,
            () => void sync(),
          );
        if (stopped) void watcher.cancel();
      } catch (e) {
        unavailable(e, "reading the members");
        retry = setTimeout(() => void sync(), RESYNC_DELAY_MS);
      } finally {
        syncing = false;
      }
    };
    void sync();
    return {
      stop: () => {
        stopped = true;
        clearTimeout(retry);
        void watcher?.cancel().catch(() => undefined);
      },
    };
  }

  /** Watches the prefix from `start`: changes after the last snapshot go to `follower`; an outage ends in a new snapshot (`resync`). */
  private async watch(
    start: bigint,
    newer: (modRevision: bigint) => boolean,
    follower: StoreFollower,
    unavailable: (e: unknown, doing: string) => void,
    resync: () => void,
  ): Promise<Watcher> {
    const watcher = await this.ns.watch().prefix("").startRevision(start.toString()).create();
    watcher.on("put", (kv) => {
      if (newer(BigInt(kv.mod_revision))) follower.change({ type: "put", name: kv.key.toString(), value: kv.value.toString() });
    });
    watcher.on("delete", (kv) => {
      if (newer(BigInt(kv.mod_revision))) follower.change({ type: "delete", name: kv.key.toString() });
    });
    watcher.on("disconnected", (e) => unavailable(e, "watching the members"));
    // Back after an outage: what changed meanwhile comes as a snapshot, whatever the watch replays.
    watcher.on("connected", () => resync());
    watcher.on("error", (e) => unavailable(e, "watching the members"));
    return watcher;
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.client.close();
  }
}
