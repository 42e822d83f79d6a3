import { type Context, type TransportBackend, registerBackend } from "@tensorpipe/core/backend";
import { ShmTransport, type ShmTransportOptions } from "./context.js";

export {
  DEFAULT_SHM_HANDSHAKE_TIMEOUT,
  DEFAULT_SHM_MAX_PENDING_HANDSHAKES,
  ShmTransport,
  type ShmTransportOptions,
} from "./context.js";

/** Above uv: preferred whenever both ends share this machine. */
export const SHM_PRIORITY = 10;

/** The shm transport for registries (the CLI, a user's own): its kind, name, default priority and how to make one. */
export const backend: TransportBackend<ShmTransportOptions, ShmTransport> = {
  kind: "transport",
  name: "shm",
  priority: SHM_PRIORITY,
  create: (options) => new ShmTransport(options),
  listenUrl: () => "shm://*",
};

/** Registers the shm transport with `context`, made with `options`, at its default priority unless told. */
export function registerShmTransport(context: Context, options?: ShmTransportOptions, priority = SHM_PRIORITY): ShmTransport {
  return registerBackend(context, backend, options, priority);
}
