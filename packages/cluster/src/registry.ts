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
import { publishedUrls } from "./published-urls.js";
import { MAX_REQUEST_BYTES, type RegistryMessage, type RegistryRequest, decodeRequest } from "./registry-protocol.js";

/** Options of serveRegistry(). */
export interface RegistryOptions {
  /** Where to listen: one URL per transport. */
  listen: string | readonly string[];
  /** The most records held at once. Default 1024. */
  maxMembers?: number | undefined;
  /** Replies a member may leave unread before the registry drops it. Default 1024. */
  maxUnreadMessages?: number | undefined;
  /**
   * Milliseconds after it starts during which the registry holds back the
   * first view it gives a member that comes back (one that claimed its
   * name again before it asked for the view), so that the members of a
   * registry that restarted are all back before any of them reads who is
   * there. New members get theirs at once. Default 2500 (members redial
   * at least every 2 s).
   */
  startupGrace?: number | undefined;
  /** Options of the registry's listener. */
  listener?: ListenerOptions | undefined;
}

/** Messages sent to a member and not yet gone, past which further changes for it are merged, newest kept. */
const WINDOW = 32;

interface Held {
  value: string;
  owner: Pipe;
}

/** What the registry sends a member: replies in order, changes merged while it reads slowly. */
interface Peer {
  inFlight: number;
  following: boolean;
  /** Changes not sent yet, by name (null: deleted), while `inFlight` is at the window. */
  backlog: Map<string, string | null>;
  unreadReplies: number;
}

/** A registry served by this process: made by serveRegistry(). */
export class Registry {
  private readonly records = new Map<string, Held>();
  private readonly peers = new Map<Pipe, Peer>();
  private readonly maxMembers: number;
  private readonly maxUnread: number;
  private readonly openUntil: number;
  private closed = false;

  /** @internal serveRegistry()'s. */
  constructor(
    private readonly listener: Listener,
    options: RegistryOptions,
  ) {
    this.maxMembers = options.maxMembers ?? 1024;
    this.maxUnread = options.maxUnreadMessages ?? 1024;
    this.openUntil = Date.now() + (options.startupGrace ?? 2_500);
    void this.acceptLoop();
  }

  /** The URL members join with: its first address over a network transport (a wildcard's as an interface's), else its first. */
  get url(): string {
    const all = publishedUrls(this.listener.addresses());
    return all.find((u) => !u.startsWith("shm://")) ?? all[0]!;
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
    for (const p of this.peers.keys()) p.close();
    this.records.clear();
    this.peers.clear();
  }

  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }

  private async acceptLoop(): Promise<void> {
    for await (const pipe of this.listener) void this.serve(pipe);
  }

  private async serve(pipe: Pipe): Promise<void> {
    const who = pipe.peerName ?? pipe.peer;
    this.peers.set(pipe, { inFlight: 0, following: false, backlog: new Map(), unreadReplies: 0 });
    try {
      for (;;) {
        const request = await this.nextRequest(pipe);
        if (request === undefined) break;
        if (request.t === "follow") {
          await this.follow(pipe);
          continue;
        }
        let reply: RegistryMessage;
        try {
          this.handle(pipe, request);
          reply = { t: "ok", id: request.id };
        } catch (e) {
          const err = e as TensorPipeError;
          reply = { t: "err", id: request.id, code: err.code, message: err.message };
        }
        this.reply(pipe, reply);
      }
    } catch (e) {
      if (log.enabled) log("registry: dropped %s: %s", who, (e as Error).message);
    } finally {
      pipe.close();
      this.peers.delete(pipe);
      for (const [name, h] of [...this.records]) {
        if (h.owner !== pipe) continue;
        this.records.delete(name);
        this.broadcast(name, null);
      }
    }
  }

  /** The next request, checked on its descriptor before anything more is read: no payloads, no tensors, metadata within bounds. */
  private async nextRequest(pipe: Pipe): Promise<RegistryRequest | undefined> {
    let d: Awaited<ReturnType<Pipe["readDescriptor"]>>;
    try {
      d = await pipe.readDescriptor();
    } catch (e) {
      if ((e as TensorPipeError).code === ErrorCode.PEER_CLOSED || (e as TensorPipeError).code === ErrorCode.CLOSED) return undefined;
      throw e;
    }
    if (d.payloads.length > 0 || d.tensors.length > 0 || d.metadata.length > MAX_REQUEST_BYTES) {
      throw new TensorPipeError(ErrorCode.PROTOCOL, "a request is metadata alone, of at most 17 KiB");
    }
    await pipe.read({ payloads: [], tensors: [] });
    return decodeRequest(d.metadata);
  }

  /** Sends the view to a member that asks to follow; to one that comes back, after the startup grace, so that a restarted registry's members are back first. */
  private async follow(pipe: Pipe): Promise<void> {
    const peer = this.peers.get(pipe);
    if (!peer || peer.following) return;
    const returning = [...this.records.values()].some((h) => h.owner === pipe);
    const wait = this.openUntil - Date.now();
    if (returning && wait > 0) await new Promise((r) => setTimeout(r, wait));
    if (!this.peers.has(pipe)) return;
    peer.following = true;
    this.write(pipe, peer, { t: "snapshot", records: [...this.records].map(([name, h]) => ({ name, value: h.value })) });
  }

  private handle(pipe: Pipe, r: Exclude<RegistryRequest, { t: "follow" }>): void {
    const held = this.records.get(r.name);
    if (r.t === "claim") {
      // A member claims the name its handshake gave, and no other.
      if (pipe.peerName !== r.name) {
        throw new TensorPipeError(
          ErrorCode.PERMISSION_DENIED,
          `a member may claim only the name its context gave in the handshake (${pipe.peerName === undefined ? "none" : JSON.stringify(pipe.peerName)}), not "${r.name}"`,
        );
      }
      if (held && held.owner !== pipe) throw new TensorPipeError(ErrorCode.NAME_TAKEN, `the name "${r.name}" is held by a live member: choose another name`);
      if (!held && this.records.size >= this.maxMembers) {
        throw new TensorPipeError(ErrorCode.UNAVAILABLE, `it holds ${this.maxMembers} members, its maxMembers: raise it where it is served`);
      }
      this.records.set(r.name, { value: r.value, owner: pipe });
      this.broadcast(r.name, r.value);
      return;
    }
    if (!held || held.owner !== pipe) throw new TensorPipeError(ErrorCode.PERMISSION_DENIED, `"${r.name}" is not held by this member`);
    if (r.t === "update") {
      held.value = r.value;
      this.broadcast(r.name, r.value);
      return;
    }
    this.records.delete(r.name);
    this.broadcast(r.name, null);
  }

  /** Tells every follower that `name` is now `value` (null: deleted). */
  private broadcast(name: string, value: string | null): void {
    for (const [pipe, peer] of this.peers) {
      if (!peer.following) continue;
      // A member that reads slowly gets the newest value of each name, not every one: what waits for it is bounded by the names.
      if (peer.inFlight >= WINDOW) peer.backlog.set(name, value);
      else this.write(pipe, peer, value === null ? { t: "delete", name } : { t: "put", name, value });
    }
  }

  /** Replies to a member's request; one that leaves maxUnreadMessages replies unread is dropped. */
  private reply(pipe: Pipe, m: RegistryMessage): void {
    const peer = this.peers.get(pipe);
    if (!peer) return;
    if (++peer.unreadReplies > this.maxUnread) {
      if (log.enabled) log("registry: dropped %s: %d replies unread", pipe.peerName ?? pipe.peer, peer.unreadReplies);
      pipe.close();
      return;
    }
    this.write(pipe, peer, m, () => peer.unreadReplies--);
  }

  private write(pipe: Pipe, peer: Peer, m: RegistryMessage, sent?: () => void): void {
    peer.inFlight++;
    pipe.write({ metadata: JSON.stringify(m) }).then(
      () => {
        peer.inFlight--;
        sent?.();
        this.drain(pipe, peer);
      },
      () => pipe.close(),
    );
  }

  /** Sends what waited while the member was behind. */
  private drain(pipe: Pipe, peer: Peer): void {
    for (const [name, value] of peer.backlog) {
      if (peer.inFlight >= WINDOW) return;
      peer.backlog.delete(name);
      this.write(pipe, peer, value === null ? { t: "delete", name } : { t: "put", name, value });
    }
  }
}

/** Serves an embedded registry on `context` at `options.listen`. */
export async function serveRegistry(context: Context, options: RegistryOptions): Promise<Registry> {
  if (typeof context !== "object" || context === null || typeof (context as Context).listen !== "function") {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, "serveRegistry(context, options): context must be a Context of @tensorpipe/core");
  }
  if (typeof options !== "object" || options === null)
    throw new TensorPipeError(ErrorCode.INVALID_ARG, 'serveRegistry(context, { listen: "uv://0.0.0.0:7000" }): options are missing');
  for (const [key, v, min] of [
    ["maxMembers", options.maxMembers, 1],
    ["maxUnreadMessages", options.maxUnreadMessages, 1],
    ["startupGrace", options.startupGrace, 0],
  ] as const) {
    if (v !== undefined && (!Number.isSafeInteger(v) || v < min))
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `serveRegistry(): ${key} must be a whole number >= ${min}, not ${String(v)}`);
  }
  const listener = await context.listen(options.listen, options.listener);
  return new Registry(listener, options);
}
