/**
 * A pipe's parts put together from the connections a handshake ended
 * with, the same way on both sides: the connections an answer asked for
 * come in its order (main where it is a new one, reply, then each
 * channel's), and each channel is made from its own.
 */
import type { Channel } from "../channel.js";
import type { Registered } from "../negotiation.js";
import type { PathReport } from "../path-report.js";
import type { PipeParts } from "../pipe/parts.js";
import type { DevicePairChoice } from "../protocol/handshake.js";
import type { Connection, TransportContext } from "../transport.js";
import type { HandshakeSettings } from "./settings.js";

/** What a side knows once every connection of the pipe is open. */
export interface Assembly {
  readonly side: "connect" | "listen";
  readonly settings: HandshakeSettings;
  readonly transport: Registered<TransportContext>;
  /** The pipe's main connection: the first one, or the one the answer asked for in its place. */
  readonly main: Connection;
  readonly reply: Connection;
  /** The channels chosen, each with how many connections it was given, in the answer's order. */
  readonly channels: Iterable<readonly [name: string, connections: number]>;
  /** The channels' connections, in the same order. */
  readonly channelConnections: readonly Connection[];
  /** The peer's wire extension of each channel. */
  readonly peerExtensions: ReadonlyMap<string, string>;
  readonly pairs: DevicePairChoice[];
  /** The peer, for error messages. */
  readonly peer: string;
  /** The peer's name, as its handshake gave (and, under authentication, proved) it. */
  readonly peerName: string | undefined;
  readonly path: PathReport;
  readonly events: PipeParts["events"];
}

/** The parts of the pipe: each channel made from its connections. */
export function assemble(a: Assembly): PipeParts {
  const channels = new Map<string, Channel>();
  const byChannel = new Map<string, Connection[]>();
  const transportMedium = a.transport.context.medium ?? "network";
  let next = 0;
  for (const [name, count] of a.channels) {
    const connections = a.channelConnections.slice(next, next + count);
    next += count;
    byChannel.set(name, connections);
    channels.set(
      name,
      a.settings.channels.get(name)!.context.createChannel(connections, a.side, { transportMedium, peerWireExtension: a.peerExtensions.get(name) }),
    );
  }
  return {
    transport: a.transport.name,
    main: a.main,
    reply: a.reply,
    channels,
    channelConnections: byChannel,
    pairs: a.pairs,
    peer: a.peer,
    peerName: a.peerName,
    peerPid: a.main.peerPid,
    side: a.side,
    options: a.settings.pipeOptions,
    path: a.path,
    events: a.events,
  };
}
