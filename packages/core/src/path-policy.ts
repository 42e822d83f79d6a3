/**
 * Which backends a pipe may use: ConnectOptions.path and
 * ListenerOptions.path. Negotiation then chooses among those alone, and a
 * pipe that cannot have them fails with ERR_TP_NEGOTIATION saying why,
 * instead of falling back to a slower path nobody asked for.
 */
import type { ChannelContext } from "./channel.js";
import { ErrorCode, TensorPipeError } from "./errors.js";
import { describeValue } from "./describe-value.js";
import type { Registered } from "./negotiation.js";
import type { TransportContext } from "./transport.js";
import type { Viability } from "./viability.js";

/** The backends a pipe may use, by the names they are registered under. */
export interface PathPolicy {
  /** Only these transports (default: any registered). */
  readonly transports?: readonly string[] | undefined;
  /** Only these channels, for every pair of devices (default: any registered). */
  readonly channels?: readonly string[] | undefined;
  /** Never these transports or channels. */
  readonly forbid?: readonly string[] | undefined;
}

function invalid(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.INVALID_ARG, message);
}

function names(what: string, value: unknown): readonly string[] | undefined {
  if (value === undefined) return undefined;
  if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) {
    throw invalid(`path.${what} must be an array of backend names, e.g. ["cma"]; got ${describeValue(value)}`);
  }
  return value as string[];
}

/**
 * `path` checked against what is registered: every name must be a backend
 * of this context (of the right kind), and what it allows must be able to
 * run here; else an error that says which and why.
 */
export function checkPathPolicy(
  path: unknown,
  transports: ReadonlyMap<string, Registered<TransportContext>>,
  channels: ReadonlyMap<string, Registered<ChannelContext>>,
): PathPolicy | undefined {
  if (path === undefined) return undefined;
  if (typeof path !== "object" || path === null || Array.isArray(path)) {
    throw invalid(`path must be an object { transports?, channels?, forbid? } of backend names; got ${describeValue(path)}`);
  }
  const p = path as Record<string, unknown>;
  const policy: PathPolicy = { transports: names("transports", p.transports), channels: names("channels", p.channels), forbid: names("forbid", p.forbid) };
  const registered = (kind: string, from: ReadonlyMap<string, unknown>, list: readonly string[] | undefined) => {
    for (const name of list ?? []) {
      if (!from.has(name))
        throw invalid(`path.${kind} names "${name}", which is not a registered ${kind.slice(0, -1)} (registered: ${[...from.keys()].join(", ") || "none"})`);
    }
  };
  registered("transports", transports, policy.transports);
  registered("channels", channels, policy.channels);
  for (const name of policy.forbid ?? []) {
    if (!transports.has(name) && !channels.has(name)) throw invalid(`path.forbid names "${name}", which is not a registered transport or channel`);
  }
  runnable("transport", allowedBackends(transports, policy, "transport"));
  runnable("channel", allowedBackends(channels, policy, "channel"));
  return policy;
}

/** Throws unless one of `allowed` can run here, with why each cannot. */
function runnable(kind: string, allowed: ReadonlyMap<string, Registered<{ isViable(): Viability }>>): void {
  const why: string[] = [];
  for (const r of allowed.values()) {
    const v = r.context.isViable();
    if (v.viable) return;
    why.push(`${r.name}: ${v.reason}`);
  }
  throw new TensorPipeError(ErrorCode.NEGOTIATION, `the path leaves no ${kind} that can run here${why.length > 0 ? ` (${why.join("; ")})` : ""}`);
}

/**
 * Throws unless `path` allows one of the transports a listener listens on:
 * else every handshake it took would fail, and only its peers would hear.
 */
export function checkListenedTransports(path: PathPolicy, transports: ReadonlyMap<string, Registered<TransportContext>>, listened: readonly string[]): void {
  const allowed = allowedBackends(transports, path, "transport");
  if (listened.some((name) => allowed.has(name))) return;
  throw invalid(
    `path (${describePath(path)}) allows none of the transports this listener listens on (${listened.join(", ")}): ` +
      `listen on a URL of an allowed transport (${[...allowed.keys()].join(", ")}) too, or allow one of these`,
  );
}

/** The backends `path` lets a pipe use. */
export function allowedBackends<T>(
  all: ReadonlyMap<string, Registered<T>>,
  path: PathPolicy,
  kind: "transport" | "channel",
): ReadonlyMap<string, Registered<T>> {
  const only = kind === "transport" ? path.transports : path.channels;
  const out = new Map<string, Registered<T>>();
  for (const [name, r] of all) {
    if (only && !only.includes(name)) continue;
    if (path.forbid?.includes(name)) continue;
    out.set(name, r);
  }
  return out;
}

/** The path in words, for errors: "channels cma; never basic". */
export function describePath(path: PathPolicy): string {
  const parts: string[] = [];
  if (path.transports) parts.push(`transports ${path.transports.join(", ")}`);
  if (path.channels) parts.push(`channels ${path.channels.join(", ")}`);
  if (path.forbid) parts.push(`never ${path.forbid.join(", ")}`);
  return parts.join("; ");
}
