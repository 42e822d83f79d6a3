/**
 * The embedded registry: a store that needs no service, for one machine or
 * a first try, as PyTorch's TCPStore on rank 0. One process serves it over
 * its context's pipes (serveRegistry()); members reach it with
 * registryStore(context, url). A record lives as long as the pipe of the
 * member that claimed it: a member that dies is removed when its pipe
 * ends. What it cannot survive is its own death: members then keep their
 * pipes and the last membership (stale) and claim their names again when a
 * registry answers at the URL.
 */
import { type Context, ErrorCode, type Listener, type ListenerOptions, type Pipe, TensorPipeError } from "@tensorpipe/core";
import { log } from "./diagnostics.js";
import { type RegistryMessage, decodeRequest } from "./registry-protocol.js";

/** Options of serveRegistry(). */
export interface RegistryOptions {
  /** Where to listen: one URL per transport. */
  listen: string | readonly string[];
  /** The most records held at once. Default 1024. */
  maxMembers?: number | undefined;
  /** Messages a member may leave unread before the registry drops it. Default 1024. */
  maxUnreadMessages?: number | undefined;
  /** Options of the registry's listener. */
  listener?: ListenerOptions | undefined;
}

/** The most names one pipe may claim. */
const MAX_CLAIMS_PER_PIPE = 8;

interface Held {
  value: string;
  owner: Pipe;
}

/** A registry served by this process: made by serveRegistry(). */
export class Registry {
  private readonly records = new Map<string, Held>();
  private readonly followers = new Set<Pipe>();
  private readonly unread = new Map<Pipe, number>();
  private readonly maxMembers: number;
  private readonly maxUnread: number;
  private closed = false;

  /** @internal serveRegistry()'s. */
  constructor(
    private readonly listener: Listener,
    options: RegistryOptions,
  ) {
    this.maxMembers = options.maxMembers ?? 1024;
    this.maxUnread = options.maxUnreadMessages ?? 1024;
    void this.acceptLoop();
  }

  /** The URL members join with (the first address). */
  get url(): string {
    return this.listener.addresses()[0]!;
  }

  /** Every address the registry listens at. */
  addresses(): string[] {
    return this.listener.addresses();
  }

  /** The names it holds now. */
  names(): string[] {
    return [...this.records.keys()];
  }

  /** Stops serving: every member's pipe to it closes, and members see it as unavailable. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.listener.close();
    for (const p of new Set([...this.followers, ...[...this.records.values()].map((h) => h.owner)])) p.close();
    this.records.clear();
    this.followers.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  private async acceptLoop(): Promise<void> {
    for await (const pipe of this.listener) void this.serve(pipe);
  }

  private async serve(pipe: Pipe): Promise<void> {
    const who = pipe.peerName ?? pipe.peer;
    try {
      for await (const m of pipe) {
        const request = decodeRequest(m.metadata);
        if (request.t === "follow") {
          if (!this.followers.has(pipe)) {
            this.followers.add(pipe);
            this.send(pipe, { t: "snapshot", records: [...this.records].map(([name, h]) => ({ name, value: h.value })) });
          }
          continue;
        }
        try {
          this.handle(pipe, request);
          this.send(pipe, { t: "ok", id: request.id });
        } catch (e) {
          const err = e as TensorPipeError;
          this.send(pipe, { t: "err", id: request.id, code: err.code, message: err.message });
        }
      }
    } catch (e) {
      if (log.enabled) log("registry: dropped %s: %s", who, (e as Error).message);
      pipe.close();
    } finally {
      this.followers.delete(pipe);
      this.unread.delete(pipe);
      for (const [name, h] of [...this.records]) {
        if (h.owner !== pipe) continue;
        this.records.delete(name);
        this.broadcast({ t: "delete", name });
      }
    }
  }

  private handle(pipe: Pipe, r: Exclude<ReturnType<typeof decodeRequest>, { t: "follow" }>): void {
    const held = this.records.get(r.name);
    if (r.t === "claim") {
      // A member claims the name its handshake gave, and no other.
      if (pipe.peerName !== r.name) {
        throw new TensorPipeError(
          ErrorCode.PERMISSION_DENIED,
          `a member may claim only the name its context gave in the handshake (${pipe.peerName === undefined ? "none" : JSON.stringify(pipe.peerName)}), not "${r.name}"`,
        );
      }
      if (held && held.owner !== pipe)
        throw new TensorPipeError(ErrorCode.NAME_TAKEN, `the name "${r.name}" is held by a live member of the registry at ${this.url}: choose another name`);
      if (!held && this.records.size >= this.maxMembers) {
        throw new TensorPipeError(
          ErrorCode.UNAVAILABLE,
          `the registry at ${this.url} holds ${this.maxMembers} members, its maxMembers: raise it where it is served`,
        );
      }
      if (!held && [...this.records.values()].filter((h) => h.owner === pipe).length >= MAX_CLAIMS_PER_PIPE) {
        throw new TensorPipeError(ErrorCode.PERMISSION_DENIED, `one pipe may hold ${MAX_CLAIMS_PER_PIPE} names`);
      }
      this.records.set(r.name, { value: r.value, owner: pipe });
      this.broadcast({ t: "put", name: r.name, value: r.value });
      return;
    }
    if (!held || held.owner !== pipe) throw new TensorPipeError(ErrorCode.PERMISSION_DENIED, `"${r.name}" is not held by this member`);
    if (r.t === "update") {
      held.value = r.value;
      this.broadcast({ t: "put", name: r.name, value: r.value });
      return;
    }
    this.records.delete(r.name);
    this.broadcast({ t: "delete", name: r.name });
  }

  private broadcast(m: RegistryMessage): void {
    for (const f of this.followers) this.send(f, m);
  }

  /** Sends `m`; a member that leaves maxUnreadMessages unread is dropped rather than buffered for. */
  private send(pipe: Pipe, m: RegistryMessage): void {
    const n = (this.unread.get(pipe) ?? 0) + 1;
    if (n > this.maxUnread) {
      if (log.enabled) log("registry: dropped %s: %d messages unread", pipe.peerName ?? pipe.peer, n);
      pipe.close();
      return;
    }
    this.unread.set(pipe, n);
    pipe.write({ metadata: JSON.stringify(m) }).then(
      () => {
        const left = (this.unread.get(pipe) ?? 1) - 1;
        if (this.unread.has(pipe)) this.unread.set(pipe, left);
      },
      () => pipe.close(),
    );
  }
}

/** Serves an embedded registry on `context` at `options.listen`. */
export async function serveRegistry(context: Context, options: RegistryOptions): Promise<Registry> {
  if (typeof context !== "object" || context === null || typeof (context as Context).listen !== "function") {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, "serveRegistry(context, options): context must be a Context of @tensorpipe/core");
  }
  if (typeof options !== "object" || options === null)
    throw new TensorPipeError(ErrorCode.INVALID_ARG, 'serveRegistry(context, { listen: "uv://0.0.0.0:7000" }): options are missing');
  for (const [key, v] of [
    ["maxMembers", options.maxMembers],
    ["maxUnreadMessages", options.maxUnreadMessages],
  ] as const) {
    if (v !== undefined && (!Number.isSafeInteger(v) || v < 1))
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `serveRegistry(): ${key} must be a whole number >= 1, not ${String(v)}`);
  }
  const listener = await context.listen(options.listen, options.listener);
  return new Registry(listener, options);
}
