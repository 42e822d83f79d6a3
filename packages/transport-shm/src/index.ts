import type { Context } from "@tensorpipe/core/backend";
import { ShmTransport, type ShmTransportOptions } from "./shm-transport.js";

export {
  DEFAULT_SHM_HANDSHAKE_TIMEOUT,
  DEFAULT_SHM_MAX_PENDING_HANDSHAKES,
  ShmTransport,
  type ShmTransportOptions,
} from "./shm-transport.js";

/** Above uv: preferred whenever both ends share this machine. */
export const SHM_PRIORITY = 10;

/** Registers the shm transport as "shm"; skipped in negotiation where not viable. */
export function registerShmTransport(context: Context, options?: ShmTransportOptions, priority = SHM_PRIORITY): ShmTransport {
  const transport = new ShmTransport(options);
  context.registerTransport(priority, "shm", transport);
  return transport;
}
