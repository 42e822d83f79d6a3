/**
 * A member's side of the embedded registry (registry.ts): one pipe to it,
 * dialled when first needed and again after it ends while the member still
 * follows. When the pipe ends, every claim is lost and the follower is told
 * the store is unavailable; the member keeps its pipes and last membership
 * and claims its name again once a registry answers.
 */
import { type Context, ErrorCode, type Pipe, TensorPipeError, isTensorPipeError } from "@tensorpipe/core";
import { isUrl } from "./record.js";
import { decodeMessage } from "./registry-protocol.js";
import type { ClaimEvents, ClusterStore, StoreClaim, StoreFollower } from "./store.js";

/** Options of registryStore(). */
export interface RegistryStoreOptions {
  /** Milliseconds a request may wait for the registry. Default 5000. */
  requestTimeout?: number | undefined;
  /** The most records a snapshot from the registry may carry. Default 4096. */
  maxMembers?: number | undefined;
}

/** The codes that say the registry cannot be reached (rather than that it refused). */
const UNREACHABLE: ReadonlySet<string> = new Set([
  ErrorCode.CONNECTION_REFUSED,
  ErrorCode.PEER_CLOSED,
  ErrorCode.CONNECTION_RESET,
  ErrorCode.TIMEOUT,
  ErrorCode.SYSTEM,
  ErrorCode.UNAVAILABLE,
]);

/** The codes a registry's refusal may carry; any other is the registry's fault. */
const REPLY_CODES: ReadonlySet<string> = new Set([ErrorCode.NAME_TAKEN, ErrorCode.PERMISSION_DENIED, ErrorCode.UNAVAILABLE, ErrorCode.INVALID_ARG]);

/** Between tries to reach the registry again while following. */
const REDIAL_DELAYS = [100, 250, 500, 1_000, 2_000];

/** A ClusterStore on the embedded registry at `url`, reached through `context` (its auth applies). */
export function registryStore(context: Context, url: string, options: RegistryStoreOptions = {}): ClusterStore {
  if (typeof context !== "object" || context === null || typeof (context as Context).connect !== "function") {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, "registryStore(context, url): context must be a Context of @tensorpipe/core");
  }
  if (!isUrl(url) || /^https?:/.test(url)) {
    throw new TensorPipeError(
      ErrorCode.INVALID_ARG,
      `registryStore(context, url): url must be the registry's TensorPipe URL, like "uv://10.0.0.1:7000" (serveRegistry()'s url, or what tensorpipe registry prints), not ${JSON.stringify(String(url))}`,
    );
  }
  return new RegistryStore(context, url, options);
}

interface Pending {
  resolve(): void;
  reject(e: TensorPipeError): void;
  timer: NodeJS.Timeout;
}

class RegistryStore implements ClusterStore {
  readonly description: string;
  private pipe: Pipe | undefined;
  private dialling: Promise<Pipe> | undefined;
  private nextId = 0;
  private readonly pending = new Map<number, Pending>();
  /** The names this member holds, with their last value: claimed again on a new pipe. */
  private readonly claims = new Map<string, { value: string; events: ClaimEvents }>();
  private follower: StoreFollower | undefined;
  private redial: NodeJS.Timeout | undefined;
  private redials = 0;
  private closed = false;
  private readonly timeout: number;
  private readonly maxMembers: number;
  private readonly followAsked = new WeakSet<Pipe>();

  constructor(
    private readonly context: Context,
    private readonly url: string,
    options: RegistryStoreOptions,
  ) {
    this.description = `the registry at ${url}`;
    this.timeout = options.requestTimeout ?? 5_000;
    this.maxMembers = options.maxMembers ?? 4096;
  }

  /** `e` as this store's error: what says the registry cannot be reached is ERR_TP_UNAVAILABLE, the rest keeps its code. */
  private unavailable(e: unknown): TensorPipeError {
    const err = e as TensorPipeError;
    if (isTensorPipeError(err) && err.message.includes(this.description)) return err;
    const code = isTensorPipeError(err) && !UNREACHABLE.has(err.code) ? err.code : ErrorCode.UNAVAILABLE;
    const what = code === ErrorCode.UNAVAILABLE ? "cannot be reached" : "refused this member";
    return new TensorPipeError(code, `${this.description} ${what}: ${err?.message ?? String(e)}`, { cause: e });
  }

  /** The pipe to the registry, dialled if there is none. */
  private connected(): Promise<Pipe> {
    if (this.closed) return Promise.reject(new TensorPipeError(ErrorCode.CLOSED, `${this.description}: the store was closed`));
    if (this.pipe && !this.pipe.isClosed) return Promise.resolve(this.pipe);
    this.dialling ??= this.context.connect(this.url, { timeout: this.timeout }).then(
      (pipe) => {
        this.dialling = undefined;
        if (this.closed) {
          pipe.close();
          throw new TensorPipeError(ErrorCode.CLOSED, `${this.description}: the store was closed`);
        }
        this.pipe = pipe;
        this.redials = 0;
        void this.readLoop(pipe);
        if (this.claims.size > 0) void this.claimAgain(pipe);
        else if (this.follower) this.askToFollow(pipe);
        return pipe;
      },
      (e) => {
        this.dialling = undefined;
        throw this.unavailable(e);
      },
    );
    return this.dialling;
  }

  private async request(r: { t: "claim" | "update"; name: string; value: string } | { t: "release"; name: string }): Promise<void> {
    // Written in the caller's tick where the pipe is open: a leave() that its context's close() started goes out before that close ends the pipe.
    const pipe = this.pipe && !this.pipe.isClosed ? this.pipe : await this.connected();
    const id = this.nextId++;
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new TensorPipeError(ErrorCode.UNAVAILABLE, `${this.description} did not answer within ${this.timeout} ms`));
      }, this.timeout);
      this.pending.set(id, { resolve, reject, timer });
      pipe.write({ metadata: JSON.stringify({ ...r, id }) }).catch((e: unknown) => {
        clearTimeout(timer);
        this.pending.delete(id);
        reject(this.unavailable(e));
      });
    });
  }

  private async readLoop(pipe: Pipe): Promise<void> {
    let error: TensorPipeError | undefined;
    try {
      for await (const m of pipe) {
        const msg = decodeMessage(m.metadata, this.maxMembers);
        switch (msg.t) {
          case "ok":
          case "err": {
            const p = this.pending.get(msg.id);
            if (!p) break;
            this.pending.delete(msg.id);
            clearTimeout(p.timer);
            if (msg.t === "ok") p.resolve();
            else p.reject(new TensorPipeError(REPLY_CODES.has(msg.code) ? (msg.code as ErrorCode) : ErrorCode.PROTOCOL, `${this.description}: ${msg.message}`));
            break;
          }
          case "snapshot":
            this.follower?.snapshot(msg.records);
            break;
          case "put":
          case "delete":
            this.follower?.change(msg.t === "put" ? { type: "put", name: msg.name, value: msg.value } : { type: "delete", name: msg.name });
            break;
        }
      }
    } catch (e) {
      error = e as TensorPipeError;
      pipe.close();
    }
    this.ended(pipe, error);
  }

  /** The pipe to the registry ended: claims are lost, the follower is told, and it is dialled again while followed. */
  private ended(pipe: Pipe, cause: TensorPipeError | undefined): void {
    if (this.pipe !== pipe) return;
    this.pipe = undefined;
    const err = new TensorPipeError(
      ErrorCode.UNAVAILABLE,
      `${this.description} went away${cause ? `: ${cause.message}` : ""}; members keep their pipes, and claim their names again when it answers`,
      {
        cause,
      },
    );
    for (const [id, p] of this.pending) {
      clearTimeout(p.timer);
      p.reject(err);
      this.pending.delete(id);
    }
    if (this.closed) return;
    if (this.follower) {
      // The claims wait for the next pipe, where they are made again before anything is read.
      this.follower.unavailable(err);
      this.scheduleRedial();
      return;
    }
    const claims = [...this.claims.values()];
    this.claims.clear();
    for (const c of claims) c.events.lost(err);
  }

  /** Claims again, on a new pipe, the names this member held on the last: one another took meanwhile is lost. Then follows. */
  private async claimAgain(pipe: Pipe): Promise<void> {
    for (const [name, c] of [...this.claims]) {
      try {
        await this.request({ t: "claim", name, value: c.value });
      } catch (e) {
        if (this.pipe !== pipe) return;
        this.claims.delete(name);
        c.events.lost(this.unavailable(e));
      }
    }
    if (this.follower && this.pipe === pipe) this.askToFollow(pipe);
  }

  /** Asks the registry on `pipe` for a snapshot and the changes after it, once per pipe. */
  private askToFollow(pipe: Pipe): void {
    if (this.followAsked.has(pipe)) return;
    this.followAsked.add(pipe);
    void pipe.write({ metadata: JSON.stringify({ t: "follow" }) }).catch(() => undefined);
  }

  private scheduleRedial(): void {
    if (this.closed || !this.follower || this.redial) return;
    const delay = REDIAL_DELAYS[Math.min(this.redials++, REDIAL_DELAYS.length - 1)];
    this.redial = setTimeout(() => {
      this.redial = undefined;
      this.connected().catch((e: unknown) => {
        this.follower?.unavailable(this.unavailable(e));
        this.scheduleRedial();
      });
    }, delay);
  }

  async claim(name: string, value: string, events: ClaimEvents): Promise<StoreClaim> {
    await this.request({ t: "claim", name, value });
    this.claims.set(name, { value, events });
    return {
      update: async (v) => {
        const held = this.claims.get(name);
        if (held) held.value = v;
        await this.request({ t: "update", name, value: v });
      },
      release: async () => {
        if (!this.claims.delete(name)) return;
        await this.request({ t: "release", name }).catch(() => undefined);
      },
    };
  }

  follow(follower: StoreFollower): { stop(): void } {
    this.follower = follower;
    this.connected().then(
      (pipe) => this.askToFollow(pipe),
      (e: unknown) => {
        follower.unavailable(this.unavailable(e));
        this.scheduleRedial();
      },
    );
    return {
      stop: () => {
        if (this.follower === follower) this.follower = undefined;
        clearTimeout(this.redial);
        this.redial = undefined;
      },
    };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.follower = undefined;
    clearTimeout(this.redial);
    this.pipe?.close();
    await this.dialling?.catch(() => undefined);
  }
}
