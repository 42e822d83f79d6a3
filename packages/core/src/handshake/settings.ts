/** What both sides of a handshake draw on, and what they share in how they run. */
import type { SharedSecretAuth } from "../auth.js";
import type { ChannelContext } from "../channel.js";
import { debugLog, describeError } from "../debug.js";
import { TensorPipeError } from "../errors.js";
import type { HandshakeEvents } from "../flight-recorder.js";
import type { Registered } from "../negotiation.js";
import { type PathPolicy, allowedBackends } from "../path-policy.js";
import type { PipeOptions } from "../pipe/parts.js";
import type { TransportContext } from "../transport.js";
import type { Viability } from "../viability.js";

export const log = debugLog("negotiation");

/** Before a peer has shown it speaks the protocol, its frames stay small. */
export const MAX_HANDSHAKE_FRAME = 1024 * 1024;

/** What both sides of a handshake draw on: a context's backends and settings. */
export interface HandshakeSettings {
  /** Sent to listeners in the first packet. */
  readonly name: string;
  /** The registered transports, by name. */
  readonly transports: ReadonlyMap<string, Registered<TransportContext>>;
  /** The registered channels, by name. */
  readonly channels: ReadonlyMap<string, Registered<ChannelContext>>;
  /** The shared-secret handshake, when on. */
  readonly auth?: SharedSecretAuth;
  /** How long the listening side waits for the connections it registered (ms). */
  readonly handshakeTimeout: number;
  /** The limits the pipe keeps on what its peer sends. */
  readonly pipeOptions: PipeOptions;
  /** The backends this handshake may choose among (ConnectOptions.path, ListenerOptions.path). */
  readonly path?: PathPolicy;
}

/** `settings` with only the backends its path allows. */
export function restricted(settings: HandshakeSettings): HandshakeSettings {
  if (!settings.path) return settings;
  return {
    ...settings,
    transports: allowedBackends(settings.transports, settings.path, "transport"),
    channels: allowedBackends(settings.channels, settings.path, "channel"),
  };
}

/** The backends of `from` that can run here, by name. */
export function viable<T extends { isViable(): Viability }>(from: ReadonlyMap<string, Registered<T>>): Map<string, T> {
  const out = new Map<string, T>();
  for (const [name, r] of from) if (r.context.isViable().viable) out.set(name, r.context);
  return out;
}

/** Runs one side's handshake, and gives its error the events it recorded. */
export async function recording<T>(events: HandshakeEvents, steps: () => Promise<T>): Promise<T> {
  try {
    return await steps();
  } catch (e) {
    if (events.enabled && e instanceof TensorPipeError) {
      events.add("error", describeError(e));
      // An earlier end may have given it its own.
      e.flightRecord ??= events.events;
    }
    throw e;
  }
}
