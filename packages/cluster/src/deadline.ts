/** A wait bounded by the caller's `timeout` and `signal` (OperationOptions), as core's operations are. */
import { ErrorCode, type OperationOptions, TensorPipeError } from "@tensorpipe/core";

/** Checks `options` as core does: an object, a timeout that is a finite number >= 0, a signal that is an AbortSignal. */
export function checkOperationOptions(options: OperationOptions | undefined, what: string): void {
  if (options === undefined) return;
  if (typeof options !== "object" || options === null)
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `${what}: options must be an object ({ timeout, signal })`);
  const { timeout, signal } = options;
  if (timeout !== undefined && (typeof timeout !== "number" || !Number.isFinite(timeout) || timeout < 0)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `${what}: timeout must be a number of milliseconds >= 0, not ${String(timeout)}`);
  }
  if (signal !== undefined && !(signal instanceof AbortSignal)) throw new TensorPipeError(ErrorCode.INVALID_ARG, `${what}: signal must be an AbortSignal`);
}

/** `promise`, or ERR_TP_TIMEOUT / ERR_TP_ABORTED naming `what` when the caller's deadline comes first. `cleanup` runs either way. */
export function bounded<T>(promise: Promise<T>, options: OperationOptions | undefined, what: string, cleanup?: () => void): Promise<T> {
  const { timeout, signal } = options ?? {};
  if (timeout === undefined && signal === undefined) return cleanup ? promise.finally(cleanup) : promise;
  return new Promise<T>((resolve, reject) => {
    let timer: NodeJS.Timeout | undefined;
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      cleanup?.();
    };
    const onAbort = () => {
      done();
      const reason = signal!.reason;
      const timedOut = reason instanceof DOMException && reason.name === "TimeoutError";
      reject(new TensorPipeError(timedOut ? ErrorCode.TIMEOUT : ErrorCode.ABORTED, `${what} was ${timedOut ? "timed out by its signal" : "aborted"}`));
    };
    // Taken first, so that `promise` settling after the deadline is never an unhandled rejection.
    promise.then(
      (v) => {
        done();
        resolve(v);
      },
      (e) => {
        done();
        reject(e);
      },
    );
    if (signal?.aborted) return onAbort();
    signal?.addEventListener("abort", onAbort, { once: true });
    if (timeout !== undefined)
      timer = setTimeout(() => {
        done();
        reject(new TensorPipeError(ErrorCode.TIMEOUT, `${what} did not complete within ${timeout} ms`));
      }, timeout);
  });
}
