import { type Connection, ErrorCode, TensorPipeError, splitHostPort } from "@tensorpipe/core/backend";
import { availableParallelism } from "node:os";
import { FrameLanes } from "./frame-lanes.js";
import type { BulkLanes } from "./lanes.js";
import { loadAddon } from "./native.js";
import { NativeLanes } from "./native-lanes.js";

/**
 * How many unsent bytes each lane's socket queues (TCP_NOTSENT_LOWAT), 0
 * for the kernel's default. Over loopback, where lanes outnumber the cores
 * their threads take turns, and bytes queued far ahead have left the cache
 * by the time the receiver copies them out: a short queue keeps them warm
 * (2 cores, 4 lanes: about 10% more). With a core per lane it only adds
 * wake-ups; across a lossy link (veth, 1% loss) it stalled some transfers
 * for hundreds of milliseconds, so networks keep the default.
 */
export function defaultUnsentLimit(lanes: readonly Connection[]): number {
  return lanes.length > availableParallelism() && lanes.every(withinMachine) ? 64 * 1024 : 0;
}

/** Whether a connection stays on this machine: to a loopback address, or to the address it comes from. */
function withinMachine(c: Connection): boolean {
  try {
    const remote = splitHostPort(c.remoteAddress).host;
    return remote === splitHostPort(c.localAddress).host || /^(127\.|::1$|::ffff:127\.)/.test(remote);
  } catch {
    return false;
  }
}

/**
 * The bulk lanes over `connections`: on their own threads where the
 * transport hands its sockets over and the addon loads, else through the
 * transport in the event loop. Both speak the same wire format.
 */
export async function openBulkLanes(
  connections: readonly Connection[],
  maxChunk: number,
  threads: boolean,
  unsentLimit = defaultUnsentLimit(connections),
): Promise<BulkLanes> {
  const addon = threads ? loadAddon().addon : undefined;
  if (!addon || !connections.every((c) => c.detach)) return new FrameLanes(connections, maxChunk);
  // The lane set keeps duplicates of the sockets handed over; the handed
  // ones are closed here whatever happens, and where any lane fails to come
  // (a peer gone mid-handshake) that is the end of the sockets that came.
  const settled = await Promise.allSettled(connections.map((c) => c.detach!()));
  const handed = settled.flatMap((r) => (r.status === "fulfilled" && r.value !== null ? [r.value] : []));
  const failed = settled.find((r): r is PromiseRejectedResult => r.status === "rejected");
  if (handed.length === 0 && !failed) return new FrameLanes(connections, maxChunk);
  try {
    if (failed || handed.length < settled.length) {
      for (const c of connections) c.close();
      if (failed) throw failed.reason;
      throw new TensorPipeError(ErrorCode.INVALID_ARG, "the transport handed over the sockets of only some mpt lanes");
    }
    return new NativeLanes(addon, handed, maxChunk, unsentLimit);
  } finally {
    for (const s of handed) s.close();
  }
}
