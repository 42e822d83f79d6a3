import { type ChannelBackend, type ChannelContext, type Context, ErrorCode, TensorPipeError, describeValue, registerBackend } from "@tensorpipe/core/backend";
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

/** What registerCudaBasicChannel takes: the channel's options, and the CPU channels to stage over besides its own. */
export interface CudaBasicRegistration extends CudaBasicChannelOptions {
  /**
   * Faster CPU channels to stage over as well, fastest first, by name
   * (`{ cma: new CmaChannelContext() }`): each is registered as a channel
   * of its own, `cuda-basic-<name>`, ranked above cuda-basic in that order,
   * so that negotiation takes the fastest one both ends have (cma on one
   * machine, where cuda-ipc cannot serve a pair) and cuda-basic over its
   * own CPU channel stays the fallback. Each has its own staging pools.
   */
  alsoOver?: Readonly<Record<string, ChannelContext>> | undefined;
}

/**
 * Registers the cuda-basic channel with `context`, made with `options`, at
 * its default priority unless told; and one over each of `alsoOver`'s CPU
 * channels, just above it.
 */
export function registerCudaBasicChannel(context: Context, options: CudaBasicRegistration = {}, priority = CUDA_BASIC_PRIORITY): CudaBasicChannelContext {
  // All checked before anything is registered.
  const invalid = (message: string) => new TensorPipeError(ErrorCode.INVALID_ARG, message);
  const isObject = (v: unknown): v is object => typeof v === "object" && v !== null && !Array.isArray(v);
  if (!isObject(options))
    throw invalid(`registerCudaBasicChannel's options must be an object { cpuChannel?, chunkBytes?, poolChunks?, alsoOver? }, got ${describeValue(options)}`);
  if (typeof priority !== "number" || !Number.isFinite(priority))
    throw invalid(`registerCudaBasicChannel's priority must be a finite number, got ${describeValue(priority)}`);
  const { alsoOver = {}, ...own } = options;
  if (!isObject(alsoOver))
    throw invalid(`alsoOver must be an object of CPU channels by name, e.g. { cma: new CmaChannelContext() }, got ${describeValue(alsoOver)}`);
  const over = Object.entries(alsoOver);
  for (const [name, cpu] of over) {
    if (!/^[A-Za-z0-9_.-]+$/.test(name))
      throw invalid(`alsoOver: ${JSON.stringify(name)} cannot name a channel (cuda-basic-<name>): use letters, digits, '_', '.' or '-'`);
    if (typeof (cpu as Partial<ChannelContext> | null)?.createChannel !== "function") {
      throw invalid(`alsoOver.${name} must be a CPU channel's context (e.g. new CmaChannelContext()), got ${describeValue(cpu)}`);
    }
    const devices = cpu.deviceDescriptors();
    if (devices.length > 0 && !devices.some((d) => d.device.type === "cpu"))
      throw invalid(`alsoOver.${name} serves no CPU memory: stage over a CPU channel (cma, mpt, basic)`);
  }
  const main = registerBackend(context, backend, own, priority);
  over.forEach(([name, cpu], i) =>
    context.registerChannel(priority + over.length - i, `cuda-basic-${name}`, new CudaBasicChannelContext({ ...own, cpuChannel: cpu })),
  );
  return main;
}
