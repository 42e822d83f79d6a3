import { type ChannelBackend, type Context, registerBackend } from "@tensorpipe/core/backend";
import { CudaBasicChannelContext, type CudaBasicChannelOptions } from "./context.js";

export { CudaBasicChannel } from "./channel.js";
export { PinnedPool } from "./pinned-pool.js";
export { CudaBasicChannelContext, type CudaBasicChannelOptions } from "./context.js";

/** Upstream's order: above the CPU channels' priorities, below cuda-ipc and cuda-gdr. */
export const CUDA_BASIC_PRIORITY = 100;

/** The cuda-basic channel for registries (the CLI, a user's own): its kind, name, default priority and how to make one. */
export const backend: ChannelBackend<CudaBasicChannelOptions, CudaBasicChannelContext> = {
  kind: "channel",
  name: "cuda-basic",
  priority: CUDA_BASIC_PRIORITY,
  create: (options) => new CudaBasicChannelContext(options),
};

/** Registers the cuda-basic channel with `context`, made with `options`, at its default priority unless told. */
export function registerCudaBasicChannel(context: Context, options?: CudaBasicChannelOptions, priority = CUDA_BASIC_PRIORITY): CudaBasicChannelContext {
  return registerBackend(context, backend, options, priority);
}
