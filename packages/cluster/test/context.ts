/** A context with the backends the tests name, registered as a user registers them. */
import { Context, type ContextOptions } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerShmTransport } from "@tensorpipe/transport-shm";
import { registerUvTransport } from "@tensorpipe/transport-uv";

export interface TestContextOptions extends ContextOptions {
  transports?: readonly string[];
  channels?: readonly string[];
}

export async function createContext(options: TestContextOptions = {}): Promise<Context> {
  const { transports = ["uv"], channels = ["basic"], ...rest } = options;
  const context = new Context(rest);
  if (transports.includes("uv")) registerUvTransport(context);
  if (transports.includes("shm")) registerShmTransport(context);
  if (channels.includes("basic")) registerBasicChannel(context);
  return context;
}
