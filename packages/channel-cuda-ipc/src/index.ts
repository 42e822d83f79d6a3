import { type ChannelBackend, type Context, registerBackend } from "@tensorpipe/core/backend";
import { CudaIpcChannelContext, type CudaIpcChannelOptions } from "./context.js";

export { CudaIpcChannel } from "./channel.js";
export { CudaIpcChannelContext, type CudaIpcChannelOptions } from "./context.js";

/** Above cuda-basic: one device-to-device copy instead of two staged ones. */
export const CUDA_IPC_PRIORITY = 200;

/** The cuda-ipc channel for registries (the CLI, a user's own): its kind, name, default priority and how to make one. */
export const backend: ChannelBackend<CudaIpcChannelOptions, CudaIpcChannelContext> = {
  kind: "channel",
  name: "cuda-ipc",
  priority: CUDA_IPC_PRIORITY,
  create: () => new CudaIpcChannelContext(),
};

/** Registers the cuda-ipc channel with `context`, made with `options`, at its default priority unless told. */
export function registerCudaIpcChannel(context: Context, options?: CudaIpcChannelOptions, priority = CUDA_IPC_PRIORITY): CudaIpcChannelContext {
  return registerBackend(context, backend, options, priority);
}
