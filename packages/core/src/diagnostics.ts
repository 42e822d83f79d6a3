/**
 * node:diagnostics_channel channels that tools (APM agents, tests, a user's
 * own metrics) subscribe to without patching anything. Messages are built
 * only while a channel has subscribers.
 *
 * | channel                               | message                        |
 * | ------------------------------------- | ------------------------------ |
 * | `tensorpipe:pipe:open`                | {@link PipeOpenMessage}         |
 * | `tensorpipe:pipe:close`               | {@link PipeCloseMessage}        |
 * | `tensorpipe:listener:connectionError` | {@link ListenerErrorMessage}    |
 * | `tensorpipe:message:write`            | {@link MessageSizesMessage}     |
 * | `tensorpipe:message:read`             | {@link MessageSizesMessage}     |
 */
import diagnostics_channel from "node:diagnostics_channel";
import type { TensorPipeError } from "./errors.js";
import type { Listener } from "./listener.js";
import type { Pipe } from "./pipe.js";
import type { DevicePairChoice } from "./protocol.js";

/** A pipe finished its handshake. */
export interface PipeOpenMessage {
  /** The pipe. */
  pipe: Pipe;
  /** "connect" on the side that dialled, "listen" on the side that accepted. */
  side: "connect" | "listen";
  /** The peer: the URL dialled, or the address the connection came from. */
  peer: string;
  /** The transport negotiated. */
  transport: string;
  /** The channel for each device pair, from this side's view. */
  channels: readonly DevicePairChoice[];
}

/** A pipe ended; `error` says why (ERR_TP_CLOSED when this side closed it). */
export interface PipeCloseMessage {
  /** The pipe that ended. */
  pipe: Pipe;
  /** Why it ended. */
  error: TensorPipeError;
}

/** A listener dropped a connection before it became a pipe. */
export interface ListenerErrorMessage {
  /** The listener. */
  listener: Listener;
  /** Why it was dropped. */
  error: TensorPipeError;
  /** Where the connection came from ("" when accepting itself failed). */
  remoteAddress: string;
}

/**
 * A message a pipe took to write (`tensorpipe:message:write`), or whose
 * descriptor it took a read for (`tensorpipe:message:read`).
 */
export interface MessageSizesMessage {
  /** The pipe. */
  pipe: Pipe;
  /** Characters of metadata. */
  metadataLength: number;
  /** Bytes of each payload, in order. */
  payloads: number[];
  /**
   * Bytes of each tensor, in order, and the channel that carries it ("" for
   * a tensor written without a target device until the peer picks one).
   */
  tensors: {
    /** Bytes of the tensor. */
    length: number;
    /** The channel that carries it. */
    channel: string;
  }[];
}

/** The channels, by what they report. */
export const diagnostics = {
  /** `tensorpipe:pipe:open`. */
  pipeOpen: diagnostics_channel.channel("tensorpipe:pipe:open"),
  /** `tensorpipe:pipe:close`. */
  pipeClose: diagnostics_channel.channel("tensorpipe:pipe:close"),
  /** `tensorpipe:listener:connectionError`. */
  listenerError: diagnostics_channel.channel("tensorpipe:listener:connectionError"),
  /** `tensorpipe:message:write`. */
  messageWrite: diagnostics_channel.channel("tensorpipe:message:write"),
  /** `tensorpipe:message:read`. */
  messageRead: diagnostics_channel.channel("tensorpipe:message:read"),
} as const;
