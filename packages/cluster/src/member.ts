/**
 * A process in a cluster: it listens, publishes its record in a store and
 * keeps it alive, follows the others' records, and dials them by name.
 * Made by join().
 */
import { EventEmitter } from "node:events";
import { type Context, ErrorCode, type ListenerOptions, type Listener, type OperationOptions, type Pipe, TensorPipeError } from "@tensorpipe/core";
import { ChangeStream } from "./change-stream.js";
import { clusterDiagnostics, log } from "./diagnostics.js";
import { bounded, checkOperationOptions } from "./deadline.js";
import { type MembershipChange, type MembershipEvents, MembershipView } from "./membership.js";
import { PipePool } from "./pipe-pool.js";
import { publishedUrls } from "./published-urls.js";
import { MAX_DATA_ENTRIES, MAX_URLS, type MemberRecord, encodeRecord, isUrl, nameProblem, sameProcess, thisHost } from "./record.js";
import type { ClusterStore, StoreClaim } from "./store.js";

/** How long join() waits for the store by default. */
const DEFAULT_JOIN_TIMEOUT = 10_000;
/** How long leave() waits for the store to take its last write. */
const LEAVE_WRITE_TIMEOUT = 1_000;
/** Between tries to claim the name again after the store lost it. */
const RECLAIM_DELAYS = [100, 250, 500, 1_000, 2_000];
/** Between tries of join() to claim its name while the store cannot be reached (or, with waitForName, while it is held). */
const JOIN_RETRY_MS = 250;
/** How long pipe() may spend dialling one member, over all the URLs its record lists, by default. */
const DEFAULT_DIAL_TIMEOUT = 10_000;
/** The least time one of a record's URLs gets, while the dial's budget lasts. */
const MIN_URL_SHARE = 1_000;

/** The member of each context that joined and has not left: one per context, whose name it is. */
const joined = new WeakMap<Context, Member>();

/** What join() needs. */
export interface JoinOptions extends OperationOptions {
  /** Where to listen: one URL per transport ("uv://0.0.0.0:0", "shm://"). */
  listen: string | readonly string[];
  /** Where the records are kept; the member owns it from now on and closes it when it leaves. */
  store: ClusterStore;
  /** The member's name; it must be its context's (new Context({ name })), which peers read in the handshake. Defaults to it. */
  name?: string | undefined;
  /** Short strings the others read in this member's record (a role, a shard, a model), at most 32. */
  data?: Readonly<Record<string, string>> | undefined;
  /** Options of the member's listener. */
  listener?: ListenerOptions | undefined;
  /**
   * The URLs to publish instead of where it listens: for an address others
   * reach it at that it cannot see (NAT, a proxy). By default it publishes
   * where it listens, a wildcard address (0.0.0.0, [::]) replaced by each
   * of the machine's interface addresses.
   */
  advertise?: readonly string[] | undefined;
  /** Waits (within the timeout) for a name a live member holds to be free, as a restarted process whose last run's record has not expired yet. Default false: ERR_TP_NAME_TAKEN at once. */
  waitForName?: boolean | undefined;
  /** How long pipe() may spend dialling a member, over all the URLs its record lists. Default 10000 ms. */
  dialTimeout?: number | undefined;
  /** The most members this member keeps; more in the store are reported (invalidRecord) and ignored. Default 4096. */
  maxMembers?: number | undefined;
}

/** Events of a Member. */
export interface MemberEvents {
  /** A member joined, changed its record, or left. */
  change: [change: MembershipChange];
  /** A record in the store that is not a member's (garbled, oversized, naming another key): it is ignored. */
  invalidRecord: [error: TensorPipeError];
  /** The store cannot be reached: members() is what was seen last (stale), pipes already open go on. */
  unavailable: [error: TensorPipeError];
  /** The store is reached again and members() is up to date. */
  available: [];
  /** The store lost this member's record and another member took the name meanwhile: this member has left the cluster (as by leave()); join again under another name. */
  nameLost: [error: TensorPipeError];
}

function invalid(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.INVALID_ARG, message);
}

/** A member of a cluster: made by join(). */
export class Member extends EventEmitter<MemberEvents> {
  /** This member's name. */
  readonly name: string;
  private record: MemberRecord;
  private claim: StoreClaim | undefined;
  private readonly streams = new Set<ChangeStream>();
  private readonly waiters = new Map<string, Set<() => void>>();
  private readonly pool: PipePool;
  private leaving: Promise<void> | undefined;
  private reclaiming = false;
  private follow: { stop(): void } | undefined;

  /** @internal join()'s. */
  constructor(
    private readonly context: Context,
    private readonly listener: Listener,
    private readonly store: ClusterStore,
    private readonly view: MembershipView,
    record: MemberRecord,
    private readonly dialTimeout: number,
  ) {
    super();
    this.name = record.name;
    this.record = record;
    this.pool = new PipePool((name) => this.dial(name));
    // Closing the context closes the listener: the member leaves with it.
    listener.once("close", () => void this.leave());
  }

  /** @internal */
  start(claim: StoreClaim, follow: { stop(): void }): void {
    this.claim = claim;
    this.follow = follow;
  }

  /** Whether leave() was called (or the context closed). */
  get hasLeft(): boolean {
    return this.leaving !== undefined;
  }

  /** Where this member listens, as its record says. */
  get urls(): readonly string[] {
    return this.record.urls;
  }

  /** The store's error while it cannot be reached (members() is then what was last seen), else undefined. */
  get stale(): TensorPipeError | undefined {
    return this.view.stale;
  }

  /** Every member last seen, this one included (as it wrote its record, until it leaves). */
  members(): MemberRecord[] {
    const others = this.view.list().filter((r) => r.name !== this.name);
    return this.leaving ? others : [this.record, ...others];
  }

  /** The member named `name`, if it was last seen. */
  member(name: string): MemberRecord | undefined {
    if (name === this.name) return this.leaving ? undefined : this.record;
    return this.view.get(name);
  }

  /**
   * The changes from now on, in order, until leave(): `for await (const c
   * of member.changes())`. Leaving the loop stops it. A reader that falls
   * 65,536 changes behind gets an error.
   */
  changes(options?: { signal?: AbortSignal | undefined }): AsyncIterableIterator<MembershipChange> {
    const stream = new ChangeStream((s) => this.streams.delete(s));
    if (this.leaving) {
      stream.end();
      return stream;
    }
    this.streams.add(stream);
    const signal = options?.signal;
    if (signal) {
      if (!(signal instanceof AbortSignal)) throw invalid("changes(): signal must be an AbortSignal");
      const onAbort = () => stream.end(new TensorPipeError(ErrorCode.ABORTED, "changes() was aborted"));
      if (signal.aborted) onAbort();
      else signal.addEventListener("abort", onAbort, { once: true });
    }
    return stream;
  }

  /** Resolves with the member named `name` once it is seen (at once if it is). */
  waitFor(name: string, options?: OperationOptions): Promise<MemberRecord> {
    try {
      checkOperationOptions(options, `waitFor("${name}")`);
      checkName(name, "waitFor");
      if (this.leaving) throw this.leftError(`waitFor("${name}")`);
    } catch (e) {
      return Promise.reject(e);
    }
    const seen = this.view.get(name);
    if (seen) return Promise.resolve(seen);
    let wake!: () => void;
    const found = new Promise<MemberRecord>((resolve, reject) => {
      wake = () => {
        const r = this.view.get(name);
        if (r) resolve(r);
        else if (this.leaving) reject(this.leftError(`waitFor("${name}")`));
      };
    });
    const set = this.waiters.get(name) ?? new Set();
    set.add(wake);
    this.waiters.set(name, set);
    return bounded(found, options, `waitFor("${name}")`, () => {
      set.delete(wake);
      if (set.size === 0) this.waiters.delete(name);
    });
  }

  /**
   * A pipe to the member named `name`: dialled on first use and reused;
   * concurrent calls share one dial. A pipe that ended is dialled again on
   * the next call. Rejects ERR_TP_NOT_FOUND when no such member was seen,
   * ERR_TP_WRONG_PEER when what answers at its URLs gives another name.
   */
  pipe(name: string, options?: OperationOptions): Promise<Pipe> {
    try {
      checkOperationOptions(options, `pipe("${name}")`);
      checkName(name, "pipe");
      if (this.leaving) throw this.leftError(`pipe("${name}")`);
      if (name === this.name) throw invalid(`pipe("${name}"): that is this member; pipes go to other members`);
    } catch (e) {
      return Promise.reject(e);
    }
    return this.pool.get(name, options);
  }

  /** The next pipe another member (or any peer) opened to this one; its `peerName` says who. */
  accept(options?: OperationOptions): Promise<Pipe> {
    if (this.leaving) return Promise.reject(this.leftError("accept()"));
    return this.listener.accept(options);
  }

  /** The pipes opened to this member, until it leaves. */
  accepted(): AsyncIterable<Pipe> {
    return this.listener;
  }

  /** Replaces the record's `data` (what the others read in members() and see as an "updated" change). */
  async update(data: Readonly<Record<string, string>>): Promise<void> {
    checkData(data);
    if (this.leaving) throw this.leftError("update()");
    // Kept only once it fits: a refused update leaves the member as it was.
    const next = { ...this.record, data: { ...data }, version: this.record.version + 1 };
    const value = encodeRecord(next);
    this.record = next;
    if (!this.claim)
      throw new TensorPipeError(
        ErrorCode.UNAVAILABLE,
        `the store (${this.store.description}) lost this member's record: the update is written when it is claimed again`,
      );
    await this.claim.update(value);
  }

  /**
   * Removes this member's record at once, stops listening, closes the pipes
   * it dialled and the store; pipes it accepted stay open. Closing the
   * context leaves too.
   */
  leave(): Promise<void> {
    this.leaving ??= (async () => {
      if (log.enabled) log("%s leaves", this.name);
      if (joined.get(this.context) === this) joined.delete(this.context);
      const claim = this.claim;
      this.claim = undefined;
      if (claim) {
        // The last write says it is a leave, so the others see "left", not "lost".
        this.record = { ...this.record, leaving: true, version: this.record.version + 1 };
        // Written in this tick: a leave that its context's close() started goes out before that close ends the store's pipe.
        let written: Promise<unknown> = Promise.resolve();
        try {
          written = bounded(claim.update(encodeRecord(this.record)), { timeout: LEAVE_WRITE_TIMEOUT }, "leave");
        } catch {}
        await written.catch(() => undefined);
        await claim.release().catch(() => undefined);
      }
      this.follow?.stop();
      this.listener.close();
      this.pool.close();
      for (const s of [...this.streams]) s.end();
      for (const set of this.waiters.values()) for (const w of set) w();
      await this.store.close();
    })();
    return this.leaving;
  }

  async [Symbol.asyncDispose](): Promise<void> {
    await this.leave();
  }

  /** @internal The view's events (one object, made with the member: the view calls it on every change). */
  readonly viewEvents: MembershipEvents = {
    change: (c) => {
      if (this.leaving) return;
      // Its own record is the member's to know: changes tell of the others.
      if (c.member.name === this.name) {
        // Deleted behind its back (not expired: the claim still holds): written again.
        if (c.type === "left" && this.claim) {
          if (log.enabled) log("%s: its record was removed from the store; writing it again", this.name);
          void Promise.resolve()
            .then(() => this.claim?.update(encodeRecord(this.record)))
            .catch(() => undefined);
        }
        return;
      }
      if (log.enabled) log("%s: %s %s%s", this.name, c.type, c.member.name, c.type === "left" ? ` (${c.reason})` : "");
      for (const s of this.streams) s.push(c);
      if (c.type !== "left") for (const w of this.waiters.get(c.member.name) ?? []) w();
      if (clusterDiagnostics.change.hasSubscribers) clusterDiagnostics.change.publish({ member: this, change: c });
      this.emit("change", c);
    },
    invalidRecord: (e) => {
      if (this.leaving) return;
      if (log.enabled) log("%s: %s", this.name, e.message);
      if (clusterDiagnostics.invalidRecord.hasSubscribers) clusterDiagnostics.invalidRecord.publish({ member: this, error: e });
      this.emit("invalidRecord", e);
    },
    availability: (e) => {
      if (this.leaving) return;
      if (log.enabled) log("%s: %s", this.name, e ? e.message : `${this.store.description} is reached again`);
      if (clusterDiagnostics.store.hasSubscribers) clusterDiagnostics.store.publish({ member: this, error: e });
      if (e) this.emit("unavailable", e);
      else this.emit("available");
    },
  };

  /** @internal The store lost this member's record: claim the name again until it is ours, taken, or the member leaves. */
  lost(error: TensorPipeError): void {
    if (log.enabled) log("%s: the store lost its record: %s", this.name, error.message);
    this.claim = undefined;
    if (this.reclaiming || this.leaving) return;
    this.reclaiming = true;
    void (async () => {
      for (let attempt = 0; !this.leaving; attempt++) {
        await new Promise((r) => setTimeout(r, RECLAIM_DELAYS[Math.min(attempt, RECLAIM_DELAYS.length - 1)]));
        if (this.leaving) break;
        try {
          const claim = await this.store.claim(this.name, encodeRecord(this.record), this.claimEvents());
          if (this.leaving) {
            await claim.release();
            break;
          }
          this.claim = claim;
          if (log.enabled) log("%s: claimed its name again", this.name);
          break;
        } catch (e) {
          const err = e as TensorPipeError;
          // Its own last record, which the store still keeps (etcd renews leases when it restarts), expires: it tries again.
          if (err.code === ErrorCode.NAME_TAKEN && !this.isOwnHolder()) {
            if (log.enabled) log("%s: its name was taken meanwhile: %s", this.name, err.message);
            const left = this.leave();
            this.emit("nameLost", err);
            await left;
            break;
          }
        }
      }
      this.reclaiming = false;
    })();
  }

  /** @internal What the store tells of this member's claim. */
  claimEvents(): { lost(e: TensorPipeError): void; isOwn(value: string): boolean } {
    return { lost: (e) => this.lost(e), isOwn: (value) => isOwnRecord(this.record, value) };
  }

  /** Whether the record the store holds under this member's name is one this process wrote. */
  private isOwnHolder(): boolean {
    const held = this.view.get(this.name);
    return held !== undefined && sameProcess(held, this.record);
  }

  private leftError(what: string): TensorPipeError {
    return new TensorPipeError(ErrorCode.CLOSED, `${what}: member "${this.name}" has left the cluster`);
  }

  /** Dials `name` at the URLs its record lists, in order, and checks that the pipe's peer is that member. */
  private async dial(name: string): Promise<Pipe> {
    const record = this.view.get(name);
    if (!record) {
      const known = this.view
        .list()
        .map((r) => r.name)
        .filter((n) => n !== this.name);
      const stale = this.view.stale ? ` (the store cannot be reached: ${this.view.stale.message})` : "";
      throw new TensorPipeError(
        ErrorCode.NOT_FOUND,
        `no member named "${name}"${stale}; members: ${known.slice(0, 10).join(", ") || "none"}${known.length > 10 ? ", ..." : ""}. waitFor("${name}") waits for one to join`,
      );
    }
    const here = thisHost();
    const urls = record.urls.filter((u) => !u.startsWith("shm://") || record.host === here);
    const errors: TensorPipeError[] = [];
    // A record's URLs are its writer's word: all of them together get one budget.
    const deadline = Date.now() + this.dialTimeout;
    for (const [i, url] of urls.entries()) {
      const left = deadline - Date.now();
      if (left <= 0) {
        errors.push(new TensorPipeError(ErrorCode.TIMEOUT, `gave up after ${this.dialTimeout} ms (JoinOptions.dialTimeout) before ${url}`));
        break;
      }
      // Each URL its share of what is left, so that one that never answers leaves time for the next.
      const share = Math.max(Math.min(left, MIN_URL_SHARE), left / (urls.length - i));
      let pipe: Pipe;
      try {
        pipe = await this.context.connect(url, { timeout: share });
      } catch (e) {
        errors.push(e as TensorPipeError);
        if (log.enabled) log("%s: %s at %s: %s", this.name, name, url, (e as Error).message);
        continue;
      }
      if (pipe.peerName === name) return pipe;
      pipe.close();
      errors.push(
        new TensorPipeError(
          ErrorCode.WRONG_PEER,
          `${url}, where the record of "${name}" says it listens, answered as ${pipe.peerName === undefined ? "a peer without a name" : JSON.stringify(pipe.peerName)}: the record is out of date or points elsewhere`,
          { where: url },
        ),
      );
    }
    const first = errors.find((e) => e.code === ErrorCode.WRONG_PEER) ?? errors[0];
    if (!first) throw new TensorPipeError(ErrorCode.NOT_FOUND, `member "${name}" lists no URL this process can dial (${record.urls.join(", ")})`);
    throw new TensorPipeError(first.code as ErrorCode, `could not open a pipe to member "${name}": ${errors.map((e) => e.message).join("; ")}`, {
      cause: first,
    });
  }
}

function checkName(name: unknown, what: string): asserts name is string {
  const problem = nameProblem(name);
  if (problem) throw invalid(`${what}(${typeof name === "string" ? JSON.stringify(name) : String(name)}): not a member's name: ${problem}`);
}

/** Whether `value` (a record in the store) is `record`'s process's: the same pid, start and host. */
function isOwnRecord(record: MemberRecord, value: string): boolean {
  try {
    const v = JSON.parse(value) as Partial<MemberRecord>;
    return v.name === record.name && sameProcess(v, record);
  } catch {
    return false;
  }
}

function checkData(data: unknown): asserts data is Record<string, string> {
  if (typeof data !== "object" || data === null || Array.isArray(data)) throw invalid('data must be an object of strings, like { role: "worker" }');
  const entries = Object.entries(data);
  if (entries.length > MAX_DATA_ENTRIES) throw invalid(`data has ${entries.length} entries, over ${MAX_DATA_ENTRIES}`);
  for (const [k, v] of entries) if (typeof v !== "string") throw invalid(`data.${k} must be a string, not ${typeof v}`);
}

/**
 * Joins a cluster: listens on `options.listen`, follows the store's
 * records, and claims `context`'s name with this member's record. Rejects
 * ERR_TP_NAME_TAKEN when a live member holds the name (unless
 * `waitForName`), ERR_TP_UNAVAILABLE when the store cannot be reached
 * within the timeout (10 s by default); it keeps trying meanwhile.
 */
export async function join(context: Context, options: JoinOptions): Promise<Member> {
  if (typeof context !== "object" || context === null || typeof (context as Context).listen !== "function") {
    throw invalid("join(context, options): context must be a Context of @tensorpipe/core");
  }
  if (typeof options !== "object" || options === null) throw invalid("join(context, { listen, store }): options are missing");
  checkOperationOptions(options, "join()");
  if (options.name !== undefined && typeof options.name !== "string") throw invalid(`join(): name must be a string, not ${typeof options.name}`);
  const name = options.name ?? context.name;
  if (options.name !== undefined && options.name !== context.name) {
    throw invalid(
      `join(): the member's name is its context's, which peers read in the handshake: make the context with new Context({ name: ${JSON.stringify(options.name)} })`,
    );
  }
  if (name === "") throw invalid('join(): the context has no name: make it with new Context({ name: "worker-1" }), unique in the cluster');
  const problem = nameProblem(name);
  if (problem) throw invalid(`join(): ${JSON.stringify(name)} cannot be a member's name: ${problem}`);
  const already = joined.get(context);
  if (already && !already.hasLeft)
    throw invalid(`join(): this context has joined already, as member "${already.name}": one member per context, whose name it is`);
  const { store } = options;
  if (typeof store !== "object" || store === null || typeof store.claim !== "function" || typeof store.follow !== "function") {
    throw invalid("join(): options.store must be a ClusterStore: etcdStore({ hosts }), registryStore(context, url), or one of your own");
  }
  const urls = typeof options.listen === "string" ? [options.listen] : options.listen;
  if (!Array.isArray(urls) || urls.length === 0 || urls.some((u) => typeof u !== "string")) {
    throw invalid('join(): options.listen must be a URL or a list of them, like "uv://0.0.0.0:0"');
  }
  const { advertise } = options;
  if (advertise !== undefined && (!Array.isArray(advertise) || advertise.length === 0 || advertise.length > MAX_URLS || advertise.some((u) => !isUrl(u)))) {
    throw invalid(`join(): advertise must be 1 to ${MAX_URLS} URLs, like ["uv://203.0.113.7:7000"]`);
  }
  const maxMembers = options.maxMembers ?? 4096;
  if (!Number.isSafeInteger(maxMembers) || maxMembers < 1) throw invalid(`join(): maxMembers must be a whole number >= 1, not ${String(options.maxMembers)}`);
  const dialTimeout = options.dialTimeout ?? DEFAULT_DIAL_TIMEOUT;
  if (typeof dialTimeout !== "number" || !(dialTimeout > 0)) throw invalid(`join(): dialTimeout must be milliseconds > 0, not ${String(options.dialTimeout)}`);
  const data = options.data ?? {};
  checkData(data);
  // The member owns the store from here: a join that fails closes it.
  let listener: Listener;
  try {
    listener = await context.listen(urls, options.listener);
  } catch (e) {
    await store.close().catch(() => undefined);
    throw e;
  }
  const backends = context.backends().filter((b) => b.viability.viable);
  const record: MemberRecord = {
    name,
    urls: advertise ? [...advertise] : publishedUrls(listener.addresses()).slice(0, MAX_URLS),
    host: thisHost(),
    pid: process.pid,
    offers: {
      transports: backends.filter((b) => b.kind === "transport").map((b) => b.name),
      channels: backends.filter((b) => b.kind === "channel").map((b) => b.name),
    },
    data: { ...data },
    version: 1,
    joinedAt: Date.now(),
  };
  const timeout = options.timeout ?? DEFAULT_JOIN_TIMEOUT;
  const deadline = Date.now() + timeout;
  const what = `join() of "${name}"`;
  let member: Member | undefined;
  let follow: { stop(): void } | undefined;
  let claiming: Promise<StoreClaim> | undefined;
  try {
    const value = encodeRecord(record);
    // The store's last word while it could not be reached: join() keeps trying until its deadline.
    let unreachable: TensorPipeError | undefined;
    let refused!: (e: TensorPipeError) => void;
    let first!: () => void;
    const synced = new Promise<void>((resolve, reject) => {
      first = resolve;
      refused = reject;
    });
    const view: MembershipView = new MembershipView(
      {
        change: (c) => member?.viewEvents.change(c),
        invalidRecord: (e) => member?.viewEvents.invalidRecord(e),
        availability: (e) => {
          if (view.ready) member?.viewEvents.availability(e);
          else if (e && e.code !== ErrorCode.UNAVAILABLE) refused(e);
          else unreachable = e;
        },
      },
      maxMembers,
    );
    const followed = {
      snapshot: (records: Parameters<MembershipView["snapshot"]>[0]) => {
        const wasReady = view.ready;
        view.snapshot(records);
        if (!wasReady) first();
      },
      change: (c: Parameters<MembershipView["change"]>[0]) => view.change(c),
      unavailable: (e: TensorPipeError) => view.unavailable(e),
    };
    member = new Member(context, listener, store, view, record, dialTimeout);
    follow = store.follow(followed);
    const late = () =>
      new TensorPipeError(
        ErrorCode.UNAVAILABLE,
        `${what}: ${store.description} could not be reached within ${timeout} ms${unreachable ? `: ${unreachable.message}` : " (no answer yet)"}`,
        { cause: unreachable },
      );
    const untilDeadline = <T>(p: Promise<T>) =>
      bounded(p, { timeout: Math.max(0, deadline - Date.now()), signal: options.signal }, what).catch((e: TensorPipeError) => {
        throw e.code === ErrorCode.TIMEOUT && !options.signal?.aborted ? late() : e;
      });
    await untilDeadline(synced);
    for (;;) {
      claiming = store.claim(name, value, member.claimEvents());
      try {
        const claim = await untilDeadline(claiming);
        member.start(claim, follow);
        break;
      } catch (e) {
        const err = e as TensorPipeError;
        const again = err.code === ErrorCode.UNAVAILABLE || (err.code === ErrorCode.NAME_TAKEN && options.waitForName === true);
        if (!again) throw err;
        unreachable = err.code === ErrorCode.UNAVAILABLE ? err : unreachable;
        if (Date.now() + JOIN_RETRY_MS >= deadline) throw err.code === ErrorCode.NAME_TAKEN ? err : late();
        await untilDeadline(new Promise((r) => setTimeout(r, JOIN_RETRY_MS)));
      }
    }
    joined.set(context, member);
    if (log.enabled) log("%s joined at %s", name, record.urls.join(", "));
    return member;
  } catch (e) {
    follow?.stop();
    listener.removeAllListeners("close");
    listener.close();
    // A claim that completes after the deadline is given back before the store closes.
    void (claiming ?? Promise.reject())
      .then(
        (c) => c.release(),
        () => undefined,
      )
      .finally(() => store.close())
      .catch(() => undefined);
    throw e;
  }
}
