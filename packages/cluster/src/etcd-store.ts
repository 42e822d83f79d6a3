/**
 * Records in etcd, as NVIDIA Dynamo and NIXL keep theirs: one key per
 * member under a prefix, bound to a lease of `ttl` seconds that the client
 * keeps alive; names claimed by a transaction on the key's creation
 * revision; the prefix read, then watched from the revision read. A member
 * that crashes or is cut off is removed by etcd when its lease expires.
 */
import { ErrorCode, TensorPipeError } from "@tensorpipe/core";
import { ExponentialBackoff } from "cockatiel";
import { Etcd3, type IKeyValue, type IOptions, type Lease, type Namespace, type Watcher } from "etcd3";
import { log } from "./diagnostics.js";
import { MAX_RECORD_BYTES } from "./record.js";
import type { ClaimEvents, ClusterStore, StoreClaim, StoreFollower, StoreRecord } from "./store.js";

/** Options of etcdStore(). */
export interface EtcdStoreOptions {
  /** etcd's client URLs, e.g. ["http://10.0.0.1:2379", "http://10.0.0.2:2379"]. */
  hosts: string | readonly string[];
  /** Prefix of every key, so that applications can share one etcd. Default "/tensorpipe/cluster/"; it ends with "/". */
  prefix?: string | undefined;
  /** The most records read under the prefix; more are left unread (and logged). Default 4096. */
  maxMembers?: number | undefined;
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
/** Records read per request: a page holds at most this many of etcd's values (1.5 MiB each at most, by default). */
const PAGE = 32;

/** What a value from etcd may take of this process: a longer one is cut just past the record's bound, which the member then reports. */
function cutValue(value: Buffer): string {
  return (value.length > MAX_RECORD_BYTES ? value.subarray(0, MAX_RECORD_BYTES + 1) : value).toString();
}

/** The key just past every key that begins with `prefix`. */
function prefixEnd(prefix: Buffer): Buffer {
  const end = Buffer.from(prefix);
  for (let i = end.length - 1; i >= 0; i--) {
    if (end[i]! < 0xff) {
      end[i]!++;
      return end.subarray(0, i + 1);
    }
  }
  return Buffer.from([0]);
}

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
  private readonly prefix: Buffer;
  private readonly maxMembers: number;
  private closed = false;

  constructor(options: EtcdStoreOptions) {
    if (typeof options !== "object" || options === null) throw invalid("options { hosts } are missing");
    const hosts = typeof options.hosts === "string" ? [options.hosts] : options.hosts;
    if (!Array.isArray(hosts) || hosts.length === 0 || hosts.some((h) => typeof h !== "string" || !/^https?:\/\//.test(h))) {
      throw invalid('hosts must be etcd client URLs, like "http://127.0.0.1:2379"');
    }
    const prefix = options.prefix ?? DEFAULT_PREFIX;
    // "/app" would share keys with "/app2/": every prefix is a folder.
    if (typeof prefix !== "string" || !prefix.endsWith("/"))
      throw invalid(`prefix must be a string that ends with "/", like "/myapp/members/", not ${JSON.stringify(prefix)}`);
    this.prefix = Buffer.from(prefix);
    this.maxMembers = options.maxMembers ?? 4096;
    if (!Number.isSafeInteger(this.maxMembers) || this.maxMembers < 1)
      throw invalid(`maxMembers must be a whole number >= 1, not ${String(options.maxMembers)}`);
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
      // A watch stream back within a couple of seconds of etcd, not cockatiel's default 30. (etcd3
      // calls next() on what it is given, a backoff factory, whatever its declaration says.)
      faultHandling: { watchBackoff: new ExponentialBackoff({ initialDelay: 100, maxDelay: 2_000 }) as never },
      // A cut-off etcd is noticed by the watch stream within seconds, not by TCP's own timeouts (etcd
      // refuses pings more often than every 5 s); a page of records fits in one response.
      grpcOptions: {
        "grpc.keepalive_time_ms": 6_000,
        "grpc.keepalive_timeout_ms": 3_000,
        "grpc.max_receive_message_length": 64 * 1024 * 1024,
      },
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
      if (!result.succeeded && !(await this.takeOver(name, value, leaseId, events))) {
        const holder = await this.ns
          .get(name)
          .string()
          .catch(() => null);
        throw new TensorPipeError(
          ErrorCode.NAME_TAKEN,
          `the name "${name}" is held by a live member in ${this.description}${holder ? ` (its record: ${JSON.stringify(holder.slice(0, 300))})` : ""}: choose another name, or wait for its lease (${this.ttl} s) to expire if that member is gone`,
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

  /**
   * Takes `name` over in place if the record under it is this member's own
   * (a lease etcd kept after the client gave it up): the same key written
   * again with the new lease, if no one wrote it meanwhile; the old lease
   * is revoked. False when the record is another's.
   */
  private async takeOver(name: string, value: string, leaseId: string, events: ClaimEvents): Promise<boolean> {
    const held = (await this.ns.get(name).exec()).kvs[0];
    if (!held || !events.isOwn?.(cutValue(held.value))) return false;
    const result = await this.ns.if(name, "Mod", "==", held.mod_revision).then(this.ns.put(name).value(value).lease(leaseId)).commit();
    if (!result.succeeded) return false;
    if (log.enabled) log("%s: took over its own record of an earlier lease", name);
    if (held.lease !== "0") this.client.leaseClient.leaseRevoke({ ID: held.lease }).catch(() => undefined);
    return true;
  }

  /**
   * Every record under the prefix at one revision, a page at a time, at
   * most maxMembers, each value bounded; and that revision.
   */
  private async readAll(): Promise<{ revision: bigint; records: StoreRecord[] }> {
    const end = prefixEnd(this.prefix);
    const records: StoreRecord[] = [];
    let key = this.prefix;
    let revision: string | undefined;
    for (;;) {
      const res = await this.client.kv.range({ key, range_end: end, limit: PAGE, ...(revision ? { revision } : {}) });
      revision ??= res.header.revision;
      for (const kv of res.kvs) {
        // One past the bound is handed on, so that the member sees there are more, and says so.
        if (records.length > this.maxMembers) {
          if (log.enabled) log("%s holds more than %d records (maxMembers): the rest are not read", this.description, this.maxMembers);
          return { revision: BigInt(revision), records };
        }
        records.push({ name: kv.key.subarray(this.prefix.length).toString(), value: cutValue(kv.value) });
      }
      if (!res.more || res.kvs.length === 0) return { revision: BigInt(revision), records };
      key = Buffer.concat([res.kvs.at(-1)!.key, Buffer.from([0])]);
    }
  }

  follow(follower: StoreFollower): { stop(): void } {
    let stopped = false;
    let watcher: Watcher | undefined;
    let revision = 0n;
    let syncing = false;
    let retry: NodeJS.Timeout | undefined;
    let down = false;
    // While etcd cannot be reached the prefix is read again every RESYNC_DELAY_MS: the first read that works is the member's new view.
    const unavailable = (e: unknown, doing: string) => {
      if (stopped) return;
      if (!down) {
        down = true;
        follower.unavailable(this.unreachable(e, doing));
      }
      retry ??= setTimeout(() => {
        retry = undefined;
        void sync();
      }, RESYNC_DELAY_MS);
    };
    const sync = async (): Promise<void> => {
      if (stopped || syncing) return;
      syncing = true;
      try {
        const read = await this.readAll();
        if (stopped) return;
        revision = read.revision;
        const records = read.records;
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
    watcher.on("put", (kv: IKeyValue) => {
      if (newer(BigInt(kv.mod_revision))) follower.change({ type: "put", name: kv.key.toString(), value: cutValue(kv.value) });
    });
    watcher.on("delete", (kv: IKeyValue) => {
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
