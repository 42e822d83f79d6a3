import { type ChannelBackend, type Context, registerBackend } from "@tensorpipe/core/backend";
import { BasicChannelContext, type BasicChannelOptions } from "./context.js";

export { BasicChannel } from "./channel.js";
export { BasicChannelContext, type BasicChannelOptions } from "./context.js";

/** Upstream TensorPipe's priority for basic: the fallback below every other channel. */
export const BASIC_PRIORITY = 0;

/** The basic channel for registries (the CLI, a user's own): its kind, name, default priority and how to make one. */
export const backend: ChannelBackend<BasicChannelOptions, BasicChannelContext> = {
  kind: "channel",
  name: "basic",
  priority: BASIC_PRIORITY,
  create: () => new BasicChannelContext(),
};

/** Registers the basic channel with `context`, made with `options`, at its default priority unless told. */
export function registerBasicChannel(context: Context, options?: BasicChannelOptions, priority = BASIC_PRIORITY): BasicChannelContext {
  return registerBackend(context, backend, options, priority);
}
