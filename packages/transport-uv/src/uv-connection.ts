import { type Connection, Deferred, TensorPipeError, closedError, fromNativeError } from "@tensorpipe/core";
import type { NativeConnection } from "./native.js";

/**
 * A Connection over the native UvConnection: promises around its callbacks,
 * and the rule that the first error closes it and is what every pending and
 * later operation rejects with.
 */
export class UvConnection implements Connection {
  readonly closed: Promise<Error | undefined>;
  readonly localAddress: string;
  readonly remoteAddress: string;
  private readonly pending = new Set<Deferred<unknown>>();
  private failure?: TensorPipeError;
  private readonly closedDeferred = new Deferred<Error | undefined>();

  constructor(private readonly native: NativeConnection) {
    this.closed = this.closedDeferred.promise;
    this.localAddress = native.localAddress();
    this.remoteAddress = native.remoteAddress();
  }

  private track<T>(start: (d: Deferred<T>) => void): Promise<T> {
    if (this.failure) return Promise.reject(this.failure);
    const d = new Deferred<T>();
    this.pending.add(d as Deferred<unknown>);
    try {
      start(d);
    } catch (e) {
      this.close(this.describe(e));
    }
    return d.promise;
  }

  private settle<T>(d: Deferred<T>, err: Error | null | undefined, value?: T): void {
    if (!this.pending.delete(d as Deferred<unknown>)) return;
    if (err) {
      this.close(this.describe(err));
      d.reject(this.failure);
    } else {
      d.resolve(value as T);
    }
  }

  write(frames: readonly ArrayBufferView[]): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    // Fast path: the kernel took every byte at once, no callback follows.
    let done: boolean;
    const d = new Deferred<void>();
    try {
      done = this.native.write([...frames], (err) => this.settle(d, err));
    } catch (e) {
      this.close(this.describe(e));
      return Promise.reject(this.failure);
    }
    if (done) return Promise.resolve();
    this.pending.add(d as Deferred<unknown>);
    return d.promise;
  }

  read(maxLength: number): Promise<Uint8Array> {
    return this.track<Uint8Array>((d) => {
      const r = this.native.read(null, maxLength, (err, frame) => this.settle(d, err, frame));
      this.immediate(d, r);
    });
  }

  readInto(target: ArrayBufferView): Promise<void> {
    return this.track<void>((d) => {
      const r = this.native.read(target, 0, (err) => this.settle(d, err));
      this.immediate(d, r);
    });
  }

  private immediate<T>(d: Deferred<T>, r: boolean | Uint8Array | Error): void {
    if (r === false) return;
    if (r instanceof Error) this.settle(d, r);
    else this.settle(d, null, (r === true ? undefined : r) as T);
  }

  private describe(e: unknown): TensorPipeError {
    return fromNativeError(e, this.remoteAddress ? `uv connection to ${this.remoteAddress}` : "uv connection");
  }

  close(error?: Error): void {
    if (this.failure) return;
    this.failure = error ? this.describe(error) : closedError("uv connection");
    this.native.close();
    for (const d of this.pending) d.reject(this.failure);
    this.pending.clear();
    this.closedDeferred.resolve(error ? this.failure : undefined);
  }
}
