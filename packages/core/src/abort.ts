import { describeValue } from "./describe-value.js";
import { ErrorCode, TensorPipeError } from "./errors.js";

/** Deadlines and cancellation for one operation (connect, read, write, accept, ...). */
export interface OperationOptions {
  /** Cancels the operation; an AbortSignal.timeout() reports ERR_TP_TIMEOUT. */
  signal?: AbortSignal | undefined;
  /** Milliseconds before the operation fails with ERR_TP_TIMEOUT. */
  timeout?: number | undefined;
}

/** The error an aborted signal stands for, naming the operation. */
export function abortError(signal: AbortSignal, what: string): TensorPipeError {
  const reason = signal.reason as { name?: string } | undefined;
  if (reason instanceof TensorPipeError) return reason;
  if (reason?.name === "TimeoutError") {
    return new TensorPipeError(ErrorCode.TIMEOUT, `${what} timed out`, { cause: reason });
  }
  // The reason the user gave is the cause, and said in the message too.
  const said = reason instanceof Error ? `: ${reason.message}` : reason !== undefined ? `: ${String(reason)}` : "";
  return new TensorPipeError(ErrorCode.ABORTED, `${what} was aborted${said}`, { cause: reason });
}

/** The longest timeout a timer takes (Node's setTimeout: a 32-bit signed count of milliseconds, about 24.8 days). */
const MAX_TIMEOUT = 2 ** 31 - 1;

/**
 * One operation's deadline: its own timer and controller, aborting on the
 * timeout, on the caller's signal, or when abort() is called. Not
 * AbortSignal.timeout() merged with AbortSignal.any(): on Node 20 a full
 * GC collects such a signal and its timer (nodejs/node#57736), and the
 * operation then waits for ever. The timer holds the controller, so the
 * signal lives until it fires or release() ends it.
 */
export class Deadline {
  /** Aborts with the timeout's TimeoutError, the caller's reason, or abort()'s. */
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private timer?: NodeJS.Timeout;
  private readonly onSourceAbort = (): void => this.abort(this.source!.reason);

  constructor(
    private readonly source?: AbortSignal,
    timeout?: number,
  ) {
    this.signal = this.controller.signal;
    if (source?.aborted) {
      this.controller.abort(source.reason);
      return;
    }
    if (source) source.addEventListener("abort", this.onSourceAbort, { once: true });
    if (timeout !== undefined) {
      // Unref'd as AbortSignal.timeout()'s is: the operation's own handle keeps the process alive.
      this.timer = setTimeout(() => this.abort(new DOMException("The operation was aborted due to timeout", "TimeoutError")), timeout);
      this.timer.unref();
    }
  }

  /** Aborts now with `reason` (unless it has already). */
  abort(reason: unknown): void {
    this.release();
    if (!this.signal.aborted) this.controller.abort(reason);
  }

  /** The operation is over: the timer and the listener on the caller's signal go. */
  release(): void {
    clearTimeout(this.timer);
    this.source?.removeEventListener("abort", this.onSourceAbort);
  }

  /** raceSignal() under this deadline, released once `promise` settles or the deadline aborts. */
  race<T>(promise: Promise<T>, what: string, onAbort?: (err: TensorPipeError) => void): Promise<T> {
    return race(promise, this.signal, what, onAbort, this);
  }
}

/**
 * Checks `options` and makes its `signal` and `timeout` one Deadline (or
 * none); ERR_TP_INVALID_ARG for options that are not. With `what`, a
 * signal that has fired already throws that operation's abort error. An
 * operation calls it before it does anything, so that either leaves the
 * pipe, listener or context as it was, and release()s it once it is over.
 */
export function operationDeadline(options: OperationOptions | undefined, what?: string): Deadline | undefined {
  const ms = checkOperationOptions(options, what);
  if (options?.signal === undefined && ms === undefined) return undefined;
  return new Deadline(options!.signal, ms);
}

/**
 * Checks `options` as operationDeadline() does, making nothing: for an
 * operation that makes its deadline only if it has to wait. The timeout in
 * whole milliseconds, or undefined for none.
 */
export function checkOperationOptions(options: OperationOptions | undefined, what?: string): number | undefined {
  if (options === undefined) return undefined;
  checkOptionsObject(options);
  const { signal, timeout } = options;
  if (signal !== undefined) {
    if (!isAbortSignal(signal)) {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        `signal must be an AbortSignal (new AbortController().signal, AbortSignal.timeout(ms)), got ${describeValue(signal)}`,
      );
    }
    let aborted: boolean;
    try {
      aborted = signal.aborted;
    } catch {
      // An object made from AbortSignal.prototype, which Node's getters refuse.
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        "signal must be an AbortSignal (new AbortController().signal, AbortSignal.timeout(ms)), got an object that only looks like one",
      );
    }
    if (what !== undefined && aborted) throw abortError(signal, what);
  }
  if (timeout === undefined || timeout === Infinity) return undefined;
  if (typeof timeout !== "number" || !(timeout >= 0) || timeout > MAX_TIMEOUT) {
    throw new TensorPipeError(
      ErrorCode.INVALID_ARG,
      `timeout must be a number of milliseconds from 0 to ${MAX_TIMEOUT} (Infinity or none for no deadline), got ${describeValue(timeout)}`,
    );
  }
  return Math.ceil(timeout);
}

/** ERR_TP_INVALID_ARG unless `options` is an object (or undefined). */
export function checkOptionsObject(options: unknown): void {
  if (options !== undefined && (typeof options !== "object" || options === null)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `options must be an object such as { timeout: 5000, signal }, got ${describeValue(options)}`);
  }
}

function isAbortSignal(value: unknown): value is AbortSignal {
  if (value instanceof AbortSignal) return true;
  // One of another realm (a vm context, a polyfill) works as well.
  const v = value as Partial<AbortSignal> | null;
  return (
    typeof v === "object" &&
    v !== null &&
    typeof v.aborted === "boolean" &&
    typeof v.addEventListener === "function" &&
    typeof v.removeEventListener === "function"
  );
}

/**
 * Settles like `promise`, or rejects when `signal` aborts first; `onAbort`
 * undoes whatever the operation had under way.
 */
export function raceSignal<T>(promise: Promise<T>, signal: AbortSignal | undefined, what: string, onAbort?: (err: TensorPipeError) => void): Promise<T> {
  return signal ? race(promise, signal, what, onAbort) : promise;
}

function race<T>(promise: Promise<T>, signal: AbortSignal, what: string, onAbort?: (err: TensorPipeError) => void, deadline?: Deadline): Promise<T> {
  if (signal.aborted) {
    promise.catch(() => undefined);
    deadline?.release();
    const err = abortError(signal, what);
    onAbort?.(err);
    return Promise.reject(err);
  }
  return new Promise<T>((resolve, reject) => {
    const abort = () => {
      const err = abortError(signal, what);
      onAbort?.(err);
      reject(err);
    };
    signal.addEventListener("abort", abort, { once: true });
    promise.then(
      (v) => {
        signal.removeEventListener("abort", abort);
        deadline?.release();
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", abort);
        deadline?.release();
        reject(e);
      },
    );
  });
}
