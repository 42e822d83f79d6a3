import type { Context } from "@tensorpipe/core/backend";
import { UvTransport, type UvTransportOptions } from "./uv-transport.js";

export { DEFAULT_PEER_TIMEOUT, UvTransport, type UvTransportOptions, interfaceAddress } from "./uv-transport.js";

/** Upstream TensorPipe's priority for uv: below shm (and ibv). */
export const UV_PRIORITY = 1;

/** Registers the uv transport under its upstream name, "uv". */
export function registerUvTransport(context: Context, options?: UvTransportOptions, priority = UV_PRIORITY): UvTransport {
  const transport = new UvTransport(options);
  context.registerTransport(priority, "uv", transport);
  return transport;
}
