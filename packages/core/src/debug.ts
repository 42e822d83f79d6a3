/**
 * Debug logs through node:util's debuglog. `NODE_DEBUG=tensorpipe` turns on
 * every section; `NODE_DEBUG=tensorpipe:negotiation` (or `tensorpipe:*`)
 * only the ones named. Off, a log costs one property read: callers check
 * `enabled` before they build a message.
 */
import { debuglog } from "node:util";
import type { TensorPipeError } from "./errors.js";
import { safeText } from "./peer-text.js";

/** One section's log. Printing happens only when `enabled`. */
export interface DebugLog {
  (format: string, ...args: unknown[]): void;
  /** Whether NODE_DEBUG asked for this section. */
  readonly enabled: boolean;
}

const root = debuglog("tensorpipe");

/** Characters of one argument of a log line. */
const MAX_ARGUMENT = 4096;

/**
 * The log of `tensorpipe:<section>`, for core and for backends alike
 * ("negotiation", "pipe", "listener", "shm", "uv", ...).
 */
export function debugLog(section: string): DebugLog {
  const own = debuglog(`tensorpipe:${section}`);
  // Both are read once, when NODE_DEBUG is: sections do not come and go.
  const enabled = own.enabled || root.enabled;
  const sink = own.enabled ? own : (format: string, ...args: unknown[]) => root(`${section}: ${format}`, ...args);
  // Arguments may carry a peer's words: each is one line of bounded length.
  const print = (format: string, ...args: unknown[]) => sink(format, ...args.map((a) => (typeof a === "string" ? safeText(a, MAX_ARGUMENT) : a)));
  const log = (enabled ? print : () => undefined) as DebugLog;
  Object.defineProperty(log, "enabled", { value: enabled });
  return log;
}

/** An error in a log line: its code, message, errno name and cause, where it has them. */
export function describeError(e: TensorPipeError): string {
  const errno = e.errnoName ? ` [${e.errnoName}]` : "";
  const cause = e.cause instanceof Error ? ` (cause: ${e.cause.message})` : "";
  return `${e.code}: ${e.message}${errno}${cause}`;
}
