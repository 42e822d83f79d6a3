import {
  CPU_DEVICE,
  type Deadline,
  ErrorCode,
  type OperationOptions,
  OptionChecks,
  type Pipe,
  TensorPipeError,
  asBytes,
  closedError,
  isTensorPipeError,
  operationDeadline,
  peerExcerpt,
} from "@tensorpipe/core/backend";
import { type RendezvousValue, decodeHeader, typeOf, viewOf } from "./value-codec.js";

/** Options of recv(): a signal or a timeout, and where to receive. */
export interface RecvOptions<T extends RendezvousValue = RendezvousValue> extends OperationOptions {
  /**
   * Memory to receive into, exactly the value's size; recv() then resolves
   * with `into`. When the value has not arrived yet and the recv has no
   * deadline, its bytes land here straight from the channel; otherwise
   * they land in memory of their own and are copied here once whole, so
   * that a recv that times out or is aborted never has bytes land in
   * `into` after it rejected.
   */
  into?: T | undefined;
}

/** Options of Rendezvous.over(). */
export interface RendezvousOptions {
  /**
   * Values the peer may have sent that no recv() has taken yet (default
   * 16,384): one more ends the rendezvous with ERR_TP_PROTOCOL. Each costs
   * its bytes and about 800 bytes more, so a peer sending empty values
   * under fresh keys would otherwise grow this process without end.
   */
  maxUnclaimed?: number | undefined;
  /**
   * Characters a key the peer sends may have (default 1024): a longer one
   * ends the rendezvous with ERR_TP_PROTOCOL. Unclaimed values keep their
   * keys, so this bounds what they hold beyond their bytes.
   */
  maxKeyLength?: number | undefined;
}

const DEFAULT_MAX_UNCLAIMED = 16_384;
const DEFAULT_MAX_KEY_LENGTH = 1024;
const check = new OptionChecks("RendezvousOptions");

interface Waiter {
  resolve(value: RendezvousValue): void;
  reject(err: TensorPipeError): void;
  into?: RendezvousValue;
  /** Whether a deadline may end it: its value then never lands in `into` directly. */
  interruptible: boolean;
  /** Set while the pipe is reading this waiter's value into `into`. */
  claimed?: boolean;
  done?: boolean;
}

/** Why `value` cannot be copied into `into`: a receiver's error, which leaves the value for the next recv. */
function misfit(into: RendezvousValue, value: RendezvousValue, key: string): TensorPipeError | undefined {
  if (into.byteLength === value.byteLength) return undefined;
  return new TensorPipeError(
    ErrorCode.INVALID_ARG,
    `recv("${key}"): into has ${into.byteLength} bytes, the value ${value.byteLength}; the value stays for the next recv("${key}")`,
  );
}

function copyInto(into: RendezvousValue, value: RendezvousValue): RendezvousValue {
  asBytes(into).set(asBytes(value));
  return into;
}

/**
 * TensorFlow's rendezvous pattern: `send(key, value)` never waits, and
 * `recv(key)` resolves with the value whether it was called before or after
 * the send. Within a process (`Rendezvous.local()`) the receiver gets the
 * very object sent; over a pipe (`Rendezvous.over(pipe)`) each side sends
 * to the other and values land in memory allocated for them (or in the
 * `into` the receiver gave). A key sent twice is received twice, in order.
 */
export class Rendezvous {
  /** Settles (never rejects) with the error that ended the rendezvous. */
  readonly closed: Promise<TensorPipeError>;

  private readonly arrived = new Map<string, RendezvousValue[]>();
  /** Values in `arrived`, all keys together. */
  private unclaimed = 0;
  private readonly waiting = new Map<string, Waiter[]>();
  private readonly writes = new Set<Promise<void>>();
  private failure?: TensorPipeError;
  /** The first send that was never written. */
  private writeFailure?: unknown;
  private settleClosed!: (err: TensorPipeError) => void;

  private constructor(
    private readonly pipe?: Pipe,
    private readonly maxUnclaimed = Infinity,
    private readonly maxKeyLength = Infinity,
  ) {
    this.closed = new Promise((r) => (this.settleClosed = r));
    if (pipe) void this.pump(pipe);
  }

  /** Senders and receivers in this process. */
  static local(): Rendezvous {
    return new Rendezvous();
  }

  /** This side of a rendezvous with the process at the other end of `pipe`, which it now owns. */
  static over(pipe: Pipe, options: RendezvousOptions = {}): Rendezvous {
    check.object(options);
    return new Rendezvous(
      pipe,
      check.limit("maxUnclaimed", options.maxUnclaimed) ?? DEFAULT_MAX_UNCLAIMED,
      check.limit("maxKeyLength", options.maxKeyLength) ?? DEFAULT_MAX_KEY_LENGTH,
    );
  }

  /**
   * Hands `value` to whoever receives `key`, without waiting. Over a pipe
   * the value's memory is read until flush() resolves: do not change it
   * before. Throws if the rendezvous has already ended.
   */
  send(key: string, value: RendezvousValue): void {
    if (typeof key !== "string") throw new TensorPipeError(ErrorCode.INVALID_ARG, "a rendezvous key must be a string");
    const type = typeOf(value);
    if (this.failure) throw this.keyError(key, "send", this.failure);
    if (!this.pipe) {
      this.deliver(key, value);
      return;
    }
    const write = this.pipe
      .write({
        metadata: JSON.stringify({ v: 1, key, type }),
        tensors: [{ buffer: asBytes(value), targetDevice: CPU_DEVICE }],
      })
      .catch((e: unknown) => {
        this.writeFailure ??= this.keyError(key, "send", this.asError(e));
        this.fail(e);
      })
      .finally(() => this.writes.delete(write));
    this.writes.add(write);
  }

  /**
   * The next value sent under `key`, as soon as it is here: of the kind
   * sent (`recv<Float32Array>(key)` says which you expect), or `into`
   * itself when given.
   */
  recv<T extends RendezvousValue = RendezvousValue>(key: string, options?: RecvOptions<T>): Promise<T>;
  recv(key: string, options: RecvOptions = {}): Promise<RendezvousValue> {
    if (typeof key !== "string") return Promise.reject(new TensorPipeError(ErrorCode.INVALID_ARG, "a rendezvous key must be a string"));
    let deadline: Deadline | undefined;
    try {
      if (options.into !== undefined && !ArrayBuffer.isView(options.into)) {
        throw new TensorPipeError(ErrorCode.INVALID_ARG, `recv("${key}"): into must be a TypedArray or DataView to copy the value into`);
      }
      deadline = operationDeadline(options, `recv("${key}")`);
    } catch (e) {
      return Promise.reject(e);
    }
    const queue = this.arrived.get(key);
    if (queue || this.failure) deadline?.release();
    if (queue) {
      const value = queue[0]!;
      const error = options.into && misfit(options.into, value, key);
      if (error) return Promise.reject(error);
      queue.shift();
      this.unclaimed--;
      if (queue.length === 0) this.arrived.delete(key);
      return Promise.resolve(options.into ? copyInto(options.into, value) : value);
    }
    if (this.failure) return Promise.reject(this.keyError(key, "recv", this.failure));
    const waiter: Waiter = { resolve: () => undefined, reject: () => undefined, into: options.into, interruptible: deadline !== undefined };
    const promise = new Promise<RendezvousValue>((resolve, reject) => {
      waiter.resolve = resolve;
      waiter.reject = reject;
    });
    const list = this.waiting.get(key) ?? [];
    list.push(waiter);
    this.waiting.set(key, list);
    if (!deadline) return promise;
    return deadline.race(promise, `recv("${key}")`, () => {
      waiter.done = true;
      this.removeWaiter(key, waiter);
    });
  }

  /** Resolves when every value sent so far has been written; rejects if one never was. */
  async flush(): Promise<void> {
    await Promise.all(this.writes);
    if (this.writeFailure) throw this.writeFailure;
  }

  /** Keys received and not yet taken, and keys waited for. */
  pendingKeys(): {
    /** Keys whose message came and nobody took yet. */
    arrived: string[];
    /** Keys a recv() waits for. */
    waiting: string[];
  } {
    return { arrived: [...this.arrived.keys()], waiting: [...this.waiting.keys()] };
  }

  /** Ends the rendezvous (and its pipe); waiting recvs reject with ERR_TP_CLOSED. */
  close(): void {
    this.fail(closedError("rendezvous"));
    this.pipe?.close();
  }

  private removeWaiter(key: string, waiter: Waiter): void {
    const list = this.waiting.get(key);
    if (!list) return;
    const i = list.indexOf(waiter);
    if (i >= 0) list.splice(i, 1);
    if (list.length === 0) this.waiting.delete(key);
  }

  /** Gives `value` to the first waiter for `key`, or keeps it for the next recv. */
  private deliver(key: string, value: RendezvousValue): void {
    for (;;) {
      const waiter = this.waiting.get(key)?.[0];
      if (!waiter) {
        const queue = this.arrived.get(key) ?? [];
        queue.push(value);
        this.arrived.set(key, queue);
        this.unclaimed++;
        return;
      }
      this.removeWaiter(key, waiter);
      waiter.done = true;
      const into = waiter.into !== value ? waiter.into : undefined;
      const error = into && misfit(into, value, key);
      // A waiter whose memory does not fit fails alone: the value goes to the next.
      if (error) {
        waiter.reject(error);
        continue;
      }
      waiter.resolve(into ? copyInto(into, value) : value);
      return;
    }
  }

  /** Reads every message of the pipe into the table until the pipe ends. */
  private async pump(pipe: Pipe): Promise<void> {
    try {
      for (;;) {
        const descriptor = await pipe.readDescriptor();
        const { header, length } = decodeHeader(descriptor);
        if (header.key.length > this.maxKeyLength) {
          throw new TensorPipeError(
            ErrorCode.PROTOCOL,
            `the peer sent a key of ${header.key.length} characters (${peerExcerpt(header.key)}), over RendezvousOptions.maxKeyLength (${this.maxKeyLength}): raise it on this side if that is meant`,
            { where: `rendezvous with ${pipe.peer}` },
          );
        }
        if (this.unclaimed >= this.maxUnclaimed && !this.waiting.has(header.key)) {
          throw new TensorPipeError(
            ErrorCode.PROTOCOL,
            `the peer sent ${this.maxUnclaimed} values no recv() has taken, and one more (key ${peerExcerpt(header.key)}): take them with recv(), or raise RendezvousOptions.maxUnclaimed`,
            { where: `rendezvous with ${pipe.peer}` },
          );
        }
        // The first waiter's own memory, when it gave some of the right size
        // and no deadline can end the wait while the bytes land there.
        const waiter = this.waiting.get(header.key)?.[0];
        const direct = waiter?.into && waiter.into.byteLength === length && !waiter.claimed && !waiter.interruptible ? waiter : undefined;
        if (direct) direct.claimed = true;
        const bytes = direct ? asBytes(direct.into!) : new Uint8Array(length);
        try {
          await pipe.read({ payloads: [], tensors: [{ buffer: bytes }] });
        } finally {
          if (direct) direct.claimed = false;
        }
        // A waiter that ended meanwhile (the rendezvous closed) leaves the value, in memory of its own.
        if (direct && !direct.done) this.deliver(header.key, direct.into!);
        else this.deliver(header.key, viewOf(header.type, direct ? new Uint8Array(bytes) : bytes));
      }
    } catch (e) {
      if (isTensorPipeError(e) && e.code === ErrorCode.PROTOCOL) pipe.close();
      this.fail(e);
    }
  }

  private keyError(key: string, op: "send" | "recv", cause: TensorPipeError): TensorPipeError {
    const what = op === "recv" ? `no value for key "${key}"` : `cannot send key "${key}"`;
    return new TensorPipeError(cause.code, `rendezvous ${what}: ${cause.message}`, { cause, errnoName: cause.errnoName });
  }

  private asError(e: unknown): TensorPipeError {
    return isTensorPipeError(e) ? e : new TensorPipeError(ErrorCode.SYSTEM, String((e as Error)?.message ?? e), { cause: e });
  }

  private fail(e: unknown): void {
    if (this.failure) return;
    const err = this.asError(e);
    this.failure = err;
    for (const [key, list] of this.waiting) {
      for (const w of list) {
        w.done = true;
        w.reject(this.keyError(key, "recv", err));
      }
    }
    this.waiting.clear();
    this.settleClosed(err);
  }
}
