/** A wait bounded by the caller's `timeout` and `signal` (OperationOptions), with core's own deadlines. */
import type { OperationOptions } from "@tensorpipe/core";
import { operationDeadline } from "@tensorpipe/core/backend";

/** Checks `options` as core's operations do (ERR_TP_INVALID_ARG; a signal that fired already: `what`'s abort error). */
export function checkOperationOptions(options: OperationOptions | undefined, what: string): void {
  operationDeadline(options, what)?.release();
}

/** `promise`, or ERR_TP_TIMEOUT / ERR_TP_ABORTED naming `what` when the caller's deadline comes first. `cleanup` runs either way. */
export function bounded<T>(promise: Promise<T>, options: OperationOptions | undefined, what: string, cleanup?: () => void): Promise<T> {
  const deadline = operationDeadline(options);
  const raced = deadline ? deadline.race(promise, what) : promise;
  return cleanup ? raced.finally(cleanup) : raced;
}
