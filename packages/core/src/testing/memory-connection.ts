/**
 * Connections in memory, for testing a pipe (or a channel) without a
 * transport: frames cross a MemoryNetwork that delivers them on later
 * turns, in order on each connection, and that a test may hold and step
 * by hand to choose how deliveries on different connections interleave.
 * An end closes cleanly (its peer reads what was sent, then the end, as
 * EOF) or is cut (its peer's next operation fails at once, as a reset).
 */
import { Deferred } from "../deferred.js";
import { ErrorCode, TensorPipeError, closedError } from "../errors.js";
import { DONE, type FrameCallback, type Connection } from "../transport.js";

/** What crosses the network: a frame, or the end of a connection's stream. */
type Delivery = { to: MemoryConnection; frame?: Uint8Array; end?: "eof" | "reset" };

/**
 * The medium between connection pairs: every frame written goes into a
 * queue of its connection, and is delivered when the network steps. Left
 * running (the default), it steps on its own a turn later, picking among
 * connections with `random`; held, only step() and flush() deliver.
 */
export class MemoryNetwork {
  private readonly queues = new Map<MemoryConnection, Delivery[]>();
  private scheduled = false;
  private held = false;

  /** `random` picks which connection delivers next when several have something (default: oldest first). */
  constructor(private readonly random: () => number = () => 0) {}

  /** A connected pair of connections; `names` are their addresses. */
  pair(names: [string, string] = ["a", "b"]): [MemoryConnection, MemoryConnection] {
    const a = new MemoryConnection(this, names[0], names[1]);
    const b = new MemoryConnection(this, names[1], names[0]);
    a.peer = b;
    b.peer = a;
    return [a, b];
  }

  /** Stops delivering on its own: deliveries wait for step() or flush(). */
  hold(): void {
    this.held = true;
  }

  /** Delivers on its own again. */
  release(): void {
    this.held = false;
    this.schedule();
  }

  /** Deliveries waiting, by the connection they go to. */
  pending(): { to: MemoryConnection; count: number }[] {
    return [...this.queues].filter(([, q]) => q.length > 0).map(([to, q]) => ({ to, count: q.length }));
  }

  /** Delivers the next frame or end waiting for `to` (or for a connection `random` picks); false when none waits. */
  step(to?: MemoryConnection): boolean {
    const waiting = [...this.queues].filter(([, q]) => q.length > 0);
    if (waiting.length === 0) return false;
    const queue = to ? this.queues.get(to) : waiting[Math.min(waiting.length - 1, Math.floor(this.random() * waiting.length))]![1];
    const d = queue?.shift();
    if (!d) return false;
    d.to.receive(d);
    return true;
  }

  /** Delivers everything waiting, and what that delivery makes, until nothing is left. */
  flush(): void {
    while (this.step());
  }

  /** @internal */
  send(d: Delivery): void {
    let q = this.queues.get(d.to);
    if (!q) this.queues.set(d.to, (q = []));
    if (d.end === "reset") q.length = 0;
    q.push(d);
    this.schedule();
  }

  private schedule(): void {
    if (this.held || this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (this.held) return;
      // One delivery a turn, so that what it sets going runs before the next.
      if (this.step()) this.schedule();
    });
  }
}

type PendingRead = { maxLength: number; target?: ArrayBufferView; deferred?: Deferred<Uint8Array | undefined>; callback?: FrameCallback };

/** One end of an in-memory connection (MemoryNetwork.pair()). */
export class MemoryConnection implements Connection {
  readonly closed: Promise<Error | undefined>;
  /** @internal */
  peer!: MemoryConnection;
  private readonly frames: Uint8Array[] = [];
  private readonly reads: PendingRead[] = [];
  private readonly closedDeferred = new Deferred<Error | undefined>();
  private ended?: "eof" | "reset";
  private failure?: TensorPipeError;

  /** @internal */
  constructor(
    private readonly network: MemoryNetwork,
    readonly localAddress: string,
    readonly remoteAddress: string,
  ) {
    this.closed = this.closedDeferred.promise;
  }

  /** Whether this end is closed: here, or by the peer's end having been read. */
  get isClosed(): boolean {
    return this.failure !== undefined;
  }

  write(frames: readonly ArrayBufferView[]): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    // Copied, as a kernel takes them: the caller may reuse its memory at once.
    for (const f of frames) this.network.send({ to: this.peer, frame: new Uint8Array(f.buffer.slice(f.byteOffset, f.byteOffset + f.byteLength)) });
    return DONE;
  }

  read(maxLength: number): Promise<Uint8Array> {
    const deferred = new Deferred<Uint8Array | undefined>();
    this.enqueue({ maxLength, deferred });
    return deferred.promise as Promise<Uint8Array>;
  }

  readFrame(maxLength: number, callback: FrameCallback): void {
    this.enqueue({ maxLength, callback });
  }

  readInto(target: ArrayBufferView): Promise<void> {
    // As a native transport does: DONE when the frame was already here.
    const frame = this.frames[0];
    if (!this.failure && this.reads.length === 0 && frame?.byteLength === target.byteLength) {
      this.frames.shift();
      new Uint8Array(target.buffer, target.byteOffset, target.byteLength).set(frame);
      this.pump();
      return DONE;
    }
    const deferred = new Deferred<Uint8Array | undefined>();
    this.enqueue({ maxLength: target.byteLength, target, deferred });
    return deferred.promise as Promise<unknown> as Promise<void>;
  }

  hasPendingInput(): boolean {
    return this.frames.length > 0;
  }

  /** Closes this end: pending operations reject; the peer reads what was sent, then the end. */
  close(error?: Error): void {
    if (this.failure) return;
    this.fail(error ? asError(error) : closedError("memory connection"), true);
    this.network.send({ to: this.peer, end: "eof" });
    this.closedDeferred.resolve(error);
  }

  /** Ends this end abruptly: the peer's operations fail at once, what was in flight is lost. */
  cut(): void {
    if (this.failure) return;
    this.fail(closedError("memory connection"), true);
    this.network.send({ to: this.peer, end: "reset" });
    this.closedDeferred.resolve(undefined);
  }

  /** @internal */
  receive(d: Delivery): void {
    if (this.failure) return;
    if (d.frame) this.frames.push(d.frame);
    else this.ended = d.end;
    if (d.end === "reset") this.frames.length = 0;
    this.pump();
  }

  private enqueue(r: PendingRead): void {
    if (this.failure) {
      settle(r, this.failure);
      return;
    }
    this.reads.push(r);
    this.pump();
  }

  /** Serves reads in order from the frames here; past the last, the end. */
  private pump(): void {
    while (this.reads.length > 0 && this.frames.length > 0) {
      const r = this.reads.shift()!;
      const frame = this.frames.shift()!;
      if (frame.byteLength > r.maxLength || (r.target && frame.byteLength !== r.target.byteLength)) {
        const err = r.target
          ? new TensorPipeError(ErrorCode.PROTOCOL, `frame of ${frame.byteLength} bytes where ${r.target.byteLength} were expected`, {
              where: this.remoteAddress,
            })
          : new TensorPipeError(ErrorCode.PROTOCOL, `frame length ${frame.byteLength} exceeds the limit of ${r.maxLength} bytes`, {
              where: this.remoteAddress,
              cause: { overLimit: true },
            });
        settle(r, err);
        this.fail(err);
        this.closedDeferred.resolve(err);
        return;
      }
      if (r.target) new Uint8Array(r.target.buffer, r.target.byteOffset, r.target.byteLength).set(frame);
      settle(r, undefined, r.target ? undefined : frame);
    }
    if (this.ended && this.frames.length === 0) {
      const err =
        this.ended === "eof"
          ? new TensorPipeError(ErrorCode.PEER_CLOSED, "read: peer closed the connection", { errnoName: "EOF", where: this.remoteAddress })
          : new TensorPipeError(ErrorCode.CONNECTION_RESET, "read: connection reset by peer", { errnoName: "ECONNRESET", where: this.remoteAddress });
      this.fail(err);
      this.closedDeferred.resolve(err);
    }
  }

  /**
   * Fails the reads waiting. As a native transport does, a callback hears
   * of it at once, but not inside this side's own close(): a turn later.
   */
  private fail(err: TensorPipeError, closing = false): void {
    this.failure ??= err;
    const failure = this.failure;
    for (const r of this.reads.splice(0)) {
      const callback = r.callback;
      if (closing && callback) queueMicrotask(() => callback(failure));
      else settle(r, failure);
    }
  }
}

function asError(e: Error): TensorPipeError {
  return e instanceof TensorPipeError ? e : new TensorPipeError(ErrorCode.SYSTEM, e.message, { cause: e });
}

/** Settles `r`: a callback at once, as a native read does for what is already here (a frame, or the end). */
function settle(r: PendingRead, err: TensorPipeError | undefined, frame?: Uint8Array): void {
  if (r.callback) {
    if (err) r.callback(err);
    else r.callback(null, frame);
    return;
  }
  if (err) r.deferred!.reject(err);
  else r.deferred!.resolve(frame);
}
