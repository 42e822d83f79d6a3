import { type Connection, type DetachedSocket, ErrorCode, TensorPipeError } from "@tensorpipe/core";
import { closeSync } from "node:fs";
import { FrameLanes } from "./frame-lanes.js";
import { loadAddon } from "./native.js";
import { NativeLanes } from "./native-lanes.js";

/** Where an mpt channel's large tensors go: several lanes, chunks placed by their headers (chunks.ts). */
export interface BulkLanes {
  send(bytes: Uint8Array): Promise<void>;
  recv(bytes: Uint8Array): Promise<void>;
  close(error?: Error): void;
  /** "threads" (native lanes) or "event loop" (frames through the transport). */
  readonly kind: string;
}

/**
 * The bulk lanes over `connections`: on their own threads where the
 * transport hands its sockets over and the addon loads, else through the
 * transport in the event loop. Both speak the same wire format.
 */
export async function openBulkLanes(connections: readonly Connection[], maxChunk: number, threads: boolean): Promise<BulkLanes> {
  const addon = threads ? loadAddon().addon : undefined;
  if (!addon || !connections.every((c) => c.detach)) return new FrameLanes(connections, maxChunk);
  const sockets = await Promise.all(connections.map((c) => c.detach!()));
  const handed = sockets.filter((s): s is DetachedSocket => s !== null);
  if (handed.length === 0) return new FrameLanes(connections, maxChunk);
  if (handed.length < sockets.length) {
    for (const s of handed) closeSync(s.fd);
    for (const c of connections) c.close();
    throw new TensorPipeError(ErrorCode.INVALID_ARG, "the transport handed over the sockets of only some mpt lanes");
  }
  return new NativeLanes(addon, handed, maxChunk);
}
