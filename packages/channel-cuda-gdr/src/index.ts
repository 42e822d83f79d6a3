import { type ChannelBackend, type Context, registerBackend } from "@tensorpipe/core/backend";
import { CudaGdrChannelContext, type CudaGdrChannelOptions } from "./context.js";

export { CudaGdrChannel, type NicSet } from "./channel.js";
export { Nic, NIC_DEPTH, QueuePair, QUEUE_DEPTH } from "./nic.js";
export { RegistrationCache, type Allocation, type HeldRegistration, type Registrar } from "./registration-cache.js";
export { closestNics, pciPathOfBusId, pciPathOfRdmaDevice } from "./nic-affinity.js";
export * from "./wire.js";
export type { NicAddress, ProbedDevice, ProbedPort } from "./native.js";
export { CudaGdrChannelContext, type CudaGdrChannelOptions, UsablePort, rdmaPorts } from "./context.js";

/** Above cuda-basic (staged through the host), below cuda-ipc (one machine). */
export const CUDA_GDR_PRIORITY = 150;

/** The cuda-gdr channel for registries (the CLI, a user's own): its kind, name, default priority and how to make one. */
export const backend: ChannelBackend<CudaGdrChannelOptions, CudaGdrChannelContext> = {
  kind: "channel",
  name: "cuda-gdr",
  priority: CUDA_GDR_PRIORITY,
  create: (options) => new CudaGdrChannelContext(options),
};

/** Registers the cuda-gdr channel with `context`, made with `options`, at its default priority unless told. */
export function registerCudaGdrChannel(context: Context, options?: CudaGdrChannelOptions, priority = CUDA_GDR_PRIORITY): CudaGdrChannelContext {
  return registerBackend(context, backend, options, priority);
}
