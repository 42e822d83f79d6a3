import { raceSignal } from "./abort.js";
import { type DebugLog, debugLog, describeError } from "./debug.js";
import { Deferred } from "./deferred.js";
import { ErrorCode, TensorPipeError, closedError, fromNativeError } from "./errors.js";
import { type Connection, DONE, type DetachedSocket, type FrameCallback, type PeerProcess } from "./transport.js";
import { turnBudget } from "./turn-budget.js";

/**
 * What a native addon's connection object offers (see native-common's
 * frame_io.h). Reads and writes each complete in the order issued.
 */
export interface NativeFrameConnection {
  /** true: every byte was written at once and `callback` will not be called. */
  write(frames: ArrayBufferView[], callback: (err: Error | null) => void): boolean;
  /**
   * false: queued, `callback` follows; otherwise the result at once: true
   * (read into target), the frame or an Error. The frame is fresh memory,
   * or with `lend` may be lent (see Connection.readFrame).
   */
  read(
    target: ArrayBufferView | null,
    maxLength: number,
    callback: (err: Error | null, frame?: Uint8Array) => void,
    lend?: boolean,
  ): boolean | Uint8Array | Error;
  /** Closes the connection at once; queued operations get no callback. */
  close(): void;
  /** This end's address, or "". */
  localAddress(): string;
  /** The peer's address, or "". */
  remoteAddress(): string;
  /**
   * Asks to be told when the connection fails while no operation waits on
   * it and nothing is left to read (an idle peer died).
   */
  onFailure?(callback: (err: Error) => void): void;
  /** Gives the socket up (see Connection.detach); throws with operations in flight. */
  detach?(): DetachedSocket;
  /** See Connection.provePeerProcess: [real, effective, saved, fs] uids, or throws ERR_TP_PERMISSION_DENIED. */
  provePeerProcess?(pid: number): [number, number, number, number];
  /** See Connection.hasPendingInput. */
  hasPendingInput?(): boolean;
  /** See Connection.serveArrived. */
  serveArrived?(): void;
  /** See Connection.peerPid. */
  peerPid?(): number;
}

// One log per transport ("tensorpipe:uv", "tensorpipe:shm", ...).
const logs = new Map<string, DebugLog>();
function logOf(transport: string): DebugLog {
  let log = logs.get(transport);
  if (!log) logs.set(transport, (log = debugLog(transport)));
  return log;
}

/**
 * A Connection over a native frame connection: one callback per kind and a
 * FIFO of promises serve every operation. The first error closes the
 * connection and is what every pending and later operation rejects with.
 */
export class NativeConnection implements Connection {
  readonly closed: Promise<Error | undefined>;
  /** This end's address, or "". */
  readonly localAddress: string;
  /** The peer's address, or "". */
  readonly remoteAddress: string;
  /** See Connection.peerPid. */
  readonly peerPid?: number;
  private readonly pendingWrites: Deferred<void>[] = [];
  // A read waits as a promise (read, readInto) or as a callback (readFrame).
  private readonly pendingReads: (Deferred<Uint8Array | undefined> | FrameCallback)[] = [];
  /** Reads put off to a later turn of the loop (turnBudget): later reads wait behind them. */
  private putOff = 0;
  /** Writes done whose completion is told in a later turn (turnBudget): later ones are told behind them. */
  private writesPutOff = 0;
  private failure?: TensorPipeError;
  private readonly closedDeferred = new Deferred<Error | undefined>();
  private readonly onWrite = (err: Error | null) => this.completeWrite(err);
  private readonly onRead = (err: Error | null, frame?: Uint8Array) => this.completeRead(err, frame);

  constructor(
    private readonly native: NativeFrameConnection,
    /** Names the transport in error messages ("uv", "shm"). */
    private readonly transport: string,
  ) {
    this.closed = this.closedDeferred.promise;
    this.localAddress = native.localAddress();
    this.remoteAddress = native.remoteAddress();
    const pid = native.peerPid?.();
    if (pid !== undefined && pid > 0) this.peerPid = pid;
    native.onFailure?.((err) => this.close(err));
    const log = logOf(transport);
    if (log.enabled) log("connection %s <-> %s open", this.localAddress || "?", this.remoteAddress || "?");
  }

  private complete<T>(queue: Deferred<T>[], err: Error | null, value: T): void {
    const d = queue.shift();
    if (!d) return;
    if (err) {
      this.close(err);
      d.reject(this.failure);
    } else {
      d.resolve(value);
    }
  }

  private completeRead(err: Error | null, frame?: Uint8Array): void {
    const waiting = this.pendingReads[0];
    if (typeof waiting !== "function") {
      this.complete(this.pendingReads as Deferred<Uint8Array | undefined>[], err, frame);
      return;
    }
    this.pendingReads.shift();
    if (err) {
      this.close(err);
      waiting(this.failure!);
    } else {
      waiting(null, frame);
    }
  }

  private completeWrite(err: Error | null): void {
    if (err || this.writesPutOff === 0) this.complete(this.pendingWrites, err, undefined);
    else this.tellWriteLater(this.pendingWrites.shift());
  }

  write(frames: readonly ArrayBufferView[]): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    try {
      // true: the kernel took every byte at once and no callback follows.
      if (this.native.write(frames as ArrayBufferView[], this.onWrite)) {
        if (this.writesPutOff > 0 || turnBudget.spent) return this.putOffWriteDone();
        turnBudget.spend();
        return DONE;
      }
    } catch (e) {
      this.close(e as Error);
      return Promise.reject(this.failure);
    }
    const d = new Deferred<void>();
    this.pendingWrites.push(d);
    return d.promise;
  }

  /** A write done at once, told in a later turn: the bytes are gone, a loop of writes yields. */
  private putOffWriteDone(): Promise<void> {
    const d = new Deferred<void>();
    this.tellWriteLater(d);
    return d.promise;
  }

  private tellWriteLater(d: Deferred<void> | undefined): void {
    if (!d) return;
    this.writesPutOff++;
    turnBudget.later(() => {
      this.writesPutOff--;
      turnBudget.spend();
      d.resolve();
    });
  }

  read(maxLength: number): Promise<Uint8Array> {
    return this.startRead(null, maxLength) as Promise<Uint8Array>;
  }

  /** DONE when the frame was already here and has landed in `target`. */
  readInto(target: ArrayBufferView): Promise<void> {
    return this.startRead(target, 0) as Promise<void>;
  }

  readFrame(maxLength: number, callback: FrameCallback): void {
    if (this.putOff > 0 || turnBudget.spent) this.putOffFrameRead(maxLength, callback);
    else this.readFrameNow(maxLength, callback);
  }

  // Closures of their own: captured here, the arguments of every read would be allocated a context.
  private putOffFrameRead(maxLength: number, callback: FrameCallback): void {
    this.putOffRead(() => this.readFrameNow(maxLength, callback));
  }

  private putOffPromisedRead(target: ArrayBufferView | null, maxLength: number): Promise<Uint8Array | undefined> {
    const d = new Deferred<Uint8Array | undefined>();
    this.putOffRead(() => this.readNow(target, maxLength).then(d.resolve, d.reject));
    return d.promise;
  }

  private readFrameNow(maxLength: number, callback: FrameCallback): void {
    if (this.failure) {
      callback(this.failure);
      return;
    }
    const r = this.nativeRead(null, maxLength, true);
    if (r === false) this.pendingReads.push(callback);
    else if (r instanceof Error) {
      this.close(r);
      callback(this.failure!);
    } else {
      turnBudget.spend();
      callback(null, r as Uint8Array);
    }
  }

  private putOffRead(read: () => void): void {
    this.putOff++;
    turnBudget.later(() => {
      this.putOff--;
      read();
    });
  }

  /** The native read's answer, a throw turned into the Error it carries. */
  private nativeRead(target: ArrayBufferView | null, maxLength: number, lend = false): boolean | Uint8Array | Error {
    try {
      return this.native.read(target, maxLength, this.onRead, lend);
    } catch (e) {
      return e as Error;
    }
  }

  private startRead(target: ArrayBufferView | null, maxLength: number): Promise<Uint8Array | undefined> {
    return this.putOff === 0 && !turnBudget.spent ? this.readNow(target, maxLength) : this.putOffPromisedRead(target, maxLength);
  }

  private readNow(target: ArrayBufferView | null, maxLength: number): Promise<Uint8Array | undefined> {
    if (this.failure) return Promise.reject(this.failure);
    const r = this.nativeRead(target, maxLength);
    if (r === false) {
      const d = new Deferred<Uint8Array | undefined>();
      this.pendingReads.push(d);
      return d.promise;
    }
    if (r instanceof Error) {
      this.close(r);
      return Promise.reject(this.failure);
    }
    turnBudget.spend();
    return r === true ? (DONE as Promise<undefined>) : Promise.resolve(r);
  }

  async detach(): Promise<DetachedSocket | null> {
    if (!this.native.detach) return null;
    await Promise.allSettled(this.pendingWrites.map((d) => d.promise));
    if (this.failure) throw this.failure;
    if (this.pendingReads.length > 0 || this.putOff > 0) {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `${this.transport} connection has reads pending: cannot hand it over`);
    }
    let socket: DetachedSocket;
    try {
      socket = this.native.detach();
    } catch (e) {
      throw fromNativeError(e, `${this.transport} connection to ${this.remoteAddress || "peer"}`);
    }
    this.failure = closedError(`${this.transport} connection (handed over to a channel)`);
    this.closedDeferred.resolve(undefined);
    return socket;
  }

  hasPendingInput(): boolean {
    return !this.failure && (this.native.hasPendingInput?.() ?? false);
  }

  serveArrived(): void {
    if (!this.failure) this.native.serveArrived?.();
  }

  provePeerProcess(pid: number): PeerProcess {
    const where = `${this.transport} connection to ${this.remoteAddress || "peer"}`;
    if (!this.native.provePeerProcess) {
      throw new TensorPipeError(ErrorCode.PERMISSION_DENIED, `the ${this.transport} transport cannot prove which process is at the other end`, { where });
    }
    if (this.failure) throw this.failure;
    try {
      return { pid, uids: this.native.provePeerProcess(pid) };
    } catch (e) {
      throw fromNativeError(e, where);
    }
  }

  close(error?: Error): void {
    if (this.failure) return;
    this.failure = error
      ? fromNativeError(error, `${this.transport} connection to ${this.remoteAddress || "peer"}`)
      : closedError(`${this.transport} connection`);
    this.native.close();
    for (const d of this.pendingWrites.splice(0)) d.reject(this.failure);
    const failure = this.failure;
    for (const d of this.pendingReads.splice(0)) {
      // A callback hears of it as a promise would: not inside close().
      if (typeof d === "function") queueMicrotask(() => d(failure));
      else d.reject(failure);
    }
    this.closedDeferred.resolve(error ? this.failure : undefined);
    const log = logOf(this.transport);
    if (log.enabled) {
      const why = error ? describeError(this.failure) : "closed here";
      log("connection %s <-> %s closed: %s", this.localAddress || "?", this.remoteAddress || "?", why);
    }
  }
}

/**
 * Connects with a native addon whose connect() returns the connection at
 * once (so that an abort can close it) and calls back when it is ready.
 * `url` names the peer in errors.
 */
export async function connectNative(
  start: (callback: (err: Error | null, connection?: NativeFrameConnection) => void) => NativeFrameConnection,
  transport: string,
  url: string,
  signal?: AbortSignal,
): Promise<NativeConnection> {
  let native: NativeFrameConnection | undefined;
  const connected = new Promise<NativeFrameConnection>((resolve, reject) => {
    try {
      native = start((err, conn) => (err ? reject(err) : resolve(conn!)));
    } catch (e) {
      reject(e);
    }
  });
  try {
    const conn = await raceSignal(connected, signal, `connect to ${url}`, () => native?.close());
    return new NativeConnection(conn, transport);
  } catch (e) {
    const err = fromNativeError(e, url);
    const log = logOf(transport);
    if (log.enabled) log("connect to %s failed: %s", url, describeError(err));
    throw err;
  }
}
