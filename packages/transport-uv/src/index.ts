import { type Context, type TransportBackend, registerBackend } from "@tensorpipe/core/backend";
import { UvTransport, type UvTransportOptions } from "./context.js";

export { DEFAULT_PEER_TIMEOUT, UvTransport, type UvTransportOptions, interfaceAddress } from "./context.js";

/** Upstream TensorPipe's priority for uv: below shm (and ibv). */
export const UV_PRIORITY = 1;

/** The uv transport for registries (the CLI, a user's own): its kind, name, default priority and how to make one. */
export const backend: TransportBackend<UvTransportOptions, UvTransport> = {
  kind: "transport",
  name: "uv",
  priority: UV_PRIORITY,
  create: (options) => new UvTransport(options),
  listenUrl: (host) => `uv://${host.includes(":") ? `[${host}]` : host}:0`,
};

/** Registers the uv transport with `context`, made with `options`, at its default priority unless told. */
export function registerUvTransport(context: Context, options?: UvTransportOptions, priority = UV_PRIORITY): UvTransport {
  return registerBackend(context, backend, options, priority);
}
