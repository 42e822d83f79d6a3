import { BasicChannelContext } from "@tensorpipe/channel-basic";
import { Context, type ContextOptions } from "@tensorpipe/core";
import { UvTransport } from "@tensorpipe/transport-uv";

/** A context with every backend this build has, at upstream's priorities. */
export function createContext(options?: ContextOptions): Context {
  const context = new Context(options);
  context.registerTransport(1, "uv", new UvTransport());
  context.registerChannel(0, "basic", new BasicChannelContext());
  return context;
}
