/** What a pipe is made of once its handshake is done, and the limits it keeps. */
import type { Channel } from "../channel.js";
import type { FlightEvent } from "../flight-recorder.js";
import type { PathReport } from "../path-report.js";
import type { DescriptorLimits } from "../protocol/message.js";
import type { DevicePairChoice } from "../protocol/handshake.js";
import type { Connection } from "../transport.js";

/** Limits a pipe enforces on what its peer sends. */
export interface PipeOptions {
  /** Largest descriptor frame accepted from the peer. */
  maxDescriptorLength: number;
  /** What one message's descriptor may announce. */
  limits: Readonly<DescriptorLimits>;
  /** Events the pipe's flight recorder keeps (0: none). */
  flightRecorder: number;
}

/** What a pipe is made of once the handshake is done (built by the handshake, made a Pipe by Context). */
export interface PipeParts {
  /** The transport negotiated. */
  transport: string;
  /** Descriptors and payloads. */
  main: Connection;
  /** DescriptorReplies. */
  reply: Connection;
  /** The channels, by name. */
  channels: Map<string, Channel>;
  /**
   * The connections each channel was given, by channel name: one that the
   * peer ends while the pipe stays open fails the pipe, idle or not.
   */
  channelConnections?: ReadonlyMap<string, readonly Connection[]>;
  /** Channel per (local device, remote device), from this side's view. */
  pairs: DevicePairChoice[];
  /** The peer, for error messages: a URL or an address. */
  peer: string;
  /** The peer context's name, as its handshake gave (and, under authentication, proved) it. */
  peerName?: string | undefined;
  /** The peer's pid, as the kernel recorded it for the main connection (Connection.peerPid). */
  peerPid?: number | undefined;
  /** Which end of the handshake this was. */
  side: "connect" | "listen";
  /** Limits on what the peer sends. */
  options: PipeOptions;
  /** What each side offered, what was chosen, and why not the rest. */
  path: PathReport;
  /** The handshake's steps, for the flight recorder. */
  events: readonly FlightEvent[];
}
