/**
 * Upstream C++ TensorPipe as a peer (native/upstream_peer.cc, built against
 * Debian's libtensorpipe-dev where it is installed): an echoing listener or
 * client for the interop tests, and the C++ side of upstream-interop.js.
 */
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { type JsonChild, jsonChild } from "./spawn-peer.js";

/** Where the build puts it. */
export const UPSTREAM_PEER = fileURLToPath(new URL("../build/Release/upstream_peer", import.meta.url));

/** Why there is no upstream peer here, or undefined when there is one. */
export function upstreamPeerMissing(): string | undefined {
  return existsSync(UPSTREAM_PEER)
    ? undefined
    : `${UPSTREAM_PEER} is not built: install libtensorpipe-dev (scripts/setup.sh does where it can), then pnpm build`;
}

/** What a listening upstream peer says first. */
export interface UpstreamListening {
  pid: number;
  /** One per transport, as upstream writes them (uv://127.0.0.1:PORT). */
  urls: string[];
}

function start<Info>(args: readonly string[]): Promise<JsonChild<Info>> {
  const missing = upstreamPeerMissing();
  if (missing) return Promise.reject(new Error(missing));
  return jsonChild([UPSTREAM_PEER, ...args]);
}

/** An upstream peer listening with `transports` and `channels` (comma lists), echoing every message. */
export function upstreamListener(transports: string, channels: string): Promise<JsonChild<UpstreamListening>> {
  return start(["listen", transports, channels]);
}

/** An upstream peer that opens `pipes` pipes to `url` and echoes every message on them. */
export function upstreamClient(transports: string, channels: string, url: string, pipes = 1): Promise<JsonChild<{ pid: number; connected: number }>> {
  return start(["connect", transports, channels, url, String(pipes)]);
}

/** Round trips of one `bytes` tensor timed by an upstream client against the echoing peer at `url`. */
export async function upstreamRoundTrips(
  transports: string,
  channels: string,
  url: string,
  bytes: number,
  rounds: number,
): Promise<{ p50Us: number; seconds: number }> {
  const run = await start<{ p50Us?: number; seconds?: number; error?: string }>(["bench", transports, channels, url, String(bytes), String(rounds)]);
  await run.stop();
  if (run.info.error !== undefined) throw new Error(`upstream round trips to ${url}: ${run.info.error}`);
  return { p50Us: run.info.p50Us!, seconds: run.info.seconds! };
}
