import { ErrorCode, TensorPipeError } from "./errors.js";

/** Deadlines and cancellation for one operation (connect, read, write, accept, ...). */
export interface OperationOptions {
  /** Cancels the operation; an AbortSignal.timeout() reports ERR_TP_TIMEOUT. */
  signal?: AbortSignal;
  /** Milliseconds before the operation fails with ERR_TP_TIMEOUT. */
  timeout?: number;
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

/** Merges `signal` and `timeout` into one signal (or none). */
export function operationSignal(options: OperationOptions | undefined): AbortSignal | undefined {
  if (options === undefined) return undefined;
  const signals: AbortSignal[] = [];
  if (options?.signal) signals.push(options.signal);
  if (options?.timeout !== undefined) {
    if (!(options.timeout >= 0)) {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `timeout must be a non-negative number, got ${options.timeout}`);
    }
    signals.push(AbortSignal.timeout(options.timeout));
  }
  if (signals.length === 0) return undefined;
  return signals.length === 1 ? signals[0] : AbortSignal.any(signals);
}

/**
 * Settles like `promise`, or rejects when `signal` aborts first; `onAbort`
 * undoes whatever the operation had under way.
 */
export function raceSignal<T>(
  promise: Promise<T>,
  signal: AbortSignal | undefined,
  what: string,
  onAbort?: (err: TensorPipeError) => void,
): Promise<T> {
  if (!signal) return promise;
  if (signal.aborted) {
    promise.catch(() => undefined);
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
        resolve(v);
      },
      (e) => {
        signal.removeEventListener("abort", abort);
        reject(e);
      },
    );
  });
}
