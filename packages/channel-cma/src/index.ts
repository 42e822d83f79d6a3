import { type Context, type ChannelBackend, registerBackend } from "@tensorpipe/core/backend";
import { CmaChannelContext, type CmaChannelOptions } from "./context.js";

export { CmaChannel } from "./channel.js";
export { CmaChannelContext, type CmaChannelOptions, defaultInlineMax } from "./context.js";
/** What defaultInlineMax() takes: the medium of the pipe's transport. */
export type { TransportMedium } from "@tensorpipe/core/backend";

/** Above basic: preferred whenever both ends share machine, user and pid namespace. */
export const CMA_PRIORITY = 20;

/** The cma channel for registries (the CLI, a user's own): its kind, name, default priority and how to make one. */
export const backend: ChannelBackend<CmaChannelOptions, CmaChannelContext> = {
  kind: "channel",
  name: "cma",
  priority: CMA_PRIORITY,
  create: (options) => new CmaChannelContext(options),
};

/** Registers the cma channel with `context`, made with `options`, at its default priority unless told. */
export function registerCmaChannel(context: Context, options?: CmaChannelOptions, priority = CMA_PRIORITY): CmaChannelContext {
  return registerBackend(context, backend, options, priority);
}
