import { type ChannelBackend, type Context, registerBackend } from "@tensorpipe/core/backend";
import { MptChannelContext, type MptChannelOptions } from "./context.js";

export { MptChannel } from "./channel.js";
export { defaultUnsentLimit } from "./bulk-lanes.js";
export type { BulkLanes } from "./lanes.js";
export { CHUNK_HEADER_BYTES, MAX_HEADER_PAD, chunkSize, decodeChunkHeader, encodeChunkHeader, type ChunkHeader } from "./chunks.js";
export { MptChannelContext, type MptChannelOptions } from "./context.js";

/** Above basic, below the same-machine channels. */
export const MPT_PRIORITY = 10;

/** The mpt channel for registries (the CLI, a user's own): its kind, name, default priority and how to make one. */
export const backend: ChannelBackend<MptChannelOptions, MptChannelContext> = {
  kind: "channel",
  name: "mpt",
  priority: MPT_PRIORITY,
  create: (options) => new MptChannelContext(options),
};

/** Registers the mpt channel with `context`, made with `options`, at its default priority unless told. */
export function registerMptChannel(context: Context, options?: MptChannelOptions, priority = MPT_PRIORITY): MptChannelContext {
  return registerBackend(context, backend, options, priority);
}
