import type { Context } from "@tensorpipe/core/backend";
import { CmaChannelContext, type CmaChannelOptions } from "./cma-channel.js";

export { CmaChannel, CmaChannelContext, type CmaChannelOptions, defaultInlineMax } from "./cma-channel.js";

/** Above basic: preferred whenever both ends share machine, user and pid namespace. */
export const CMA_PRIORITY = 20;

/** Registers the cma channel with `context` (at upstream's priority unless told). */
export function registerCmaChannel(context: Context, options?: CmaChannelOptions, priority = CMA_PRIORITY): CmaChannelContext {
  const channel = new CmaChannelContext(options);
  context.registerChannel(priority, "cma", channel);
  return channel;
}
