/**
 * The members as this member last saw them: a store's snapshots and
 * changes turned into joins, updates and leaves, with records that do not
 * check out reported and ignored. While the store cannot be reached the
 * last view stands, marked stale; the next snapshot brings it up to date.
 */
import { createHash } from "node:crypto";
import { ErrorCode, TensorPipeError } from "@tensorpipe/core";
import { type MemberRecord, decodeRecord, sameProcess } from "./record.js";
import type { StoreChange, StoreFollower, StoreRecord } from "./store.js";

/** Why a member left, where it is known. */
export type LeaveReason =
  /** It called leave() or closed its context. */
  | "left"
  /** Its record expired: its process died, or it lost the store for longer than its lease. */
  | "lost"
  /** It was gone when the store was reached again after an outage. */
  | "unknown";

/** A change of the membership. */
export type MembershipChange =
  | { readonly type: "joined"; readonly member: MemberRecord }
  | { readonly type: "updated"; readonly member: MemberRecord; readonly previous: MemberRecord }
  | { readonly type: "left"; readonly member: MemberRecord; readonly reason: LeaveReason };

/** What the view tells its owner. */
export interface MembershipEvents {
  change(change: MembershipChange): void;
  /** A record that is not a member's (garbled, oversized, naming another key): ignored. */
  invalidRecord(error: TensorPipeError): void;
  /** The store went away (the view is stale) or came back (`error` undefined). */
  availability(error: TensorPipeError | undefined): void;
}

/** The members last seen, kept from a store's follower calls. */
export class MembershipView implements StoreFollower {
  private readonly records = new Map<string, MemberRecord>();
  /** A digest of each value, so that a value seen again changes nothing (and a rejected one is not kept). */
  private readonly values = new Map<string, string>();
  private staleError: TensorPipeError | undefined;
  private synced = false;

  constructor(
    private readonly events: MembershipEvents,
    /** The most members held: a store that lists more is reported, the rest ignored. */
    private readonly maxMembers = 4096,
  ) {}

  /** Whether a first snapshot came. */
  get ready(): boolean {
    return this.synced;
  }

  /** The store's error while it cannot be reached, else undefined. */
  get stale(): TensorPipeError | undefined {
    return this.staleError;
  }

  get(name: string): MemberRecord | undefined {
    return this.records.get(name);
  }

  list(): MemberRecord[] {
    return [...this.records.values()];
  }

  snapshot(records: readonly StoreRecord[]): void {
    const seen = new Set<string>();
    for (const r of records) {
      seen.add(r.name);
      this.put(r.name, r.value);
    }
    for (const name of [...this.records.keys()]) {
      if (!seen.has(name)) this.remove(name, "unknown");
    }
    for (const name of [...this.values.keys()]) if (!seen.has(name)) this.values.delete(name);
    this.synced = true;
    if (this.staleError) {
      this.staleError = undefined;
      this.events.availability(undefined);
    }
  }

  change(c: StoreChange): void {
    if (c.type === "put") {
      this.put(c.name, c.value);
      return;
    }
    this.values.delete(c.name);
    const record = this.records.get(c.name);
    if (record) this.remove(c.name, "lost");
  }

  unavailable(error: TensorPipeError): void {
    if (this.staleError) return;
    this.staleError = error;
    this.events.availability(error);
  }

  private put(name: string, value: string): void {
    const digest = createHash("sha256").update(value).digest("base64");
    if (this.values.get(name) === digest) return;
    this.values.set(name, digest);
    let record: MemberRecord;
    try {
      record = decodeRecord(name, value);
    } catch (e) {
      this.events.invalidRecord(e as TensorPipeError);
      // What was there before stays: a garbled write does not make a member leave.
      return;
    }
    const previous = this.records.get(name);
    if (!previous && this.records.size >= this.maxMembers) {
      this.events.invalidRecord(
        new TensorPipeError(
          ErrorCode.PROTOCOL,
          `the store lists more than ${this.maxMembers} members (JoinOptions.maxMembers): ${JSON.stringify(name.slice(0, 128))} is ignored`,
        ),
      );
      return;
    }
    // Its last write before it goes: it has left, whether or not the delete follows.
    if (record.leaving) {
      if (previous) this.remove(name, "left", record);
      return;
    }
    // The name taken again by another process, or the same one rejoining: the first is gone.
    if (previous && !sameProcess(previous, record)) {
      this.remove(name, "lost");
    }
    const before = this.records.get(name);
    this.records.set(name, record);
    if (!before) this.events.change({ type: "joined", member: record });
    else this.events.change({ type: "updated", member: record, previous: before });
  }

  private remove(name: string, reason: LeaveReason, last?: MemberRecord): void {
    const record = this.records.get(name)!;
    this.records.delete(name);
    this.events.change({ type: "left", member: last ?? record, reason });
  }
}
