/**
 * What can be observed of a pipe, told by its operations as they change
 * state, and kept out of them: counters (pipe.stats()), the flight
 * recorder, diagnostics_channel messages and debug logs. Messages are
 * built only while a channel has subscribers.
 */
import type { Channel } from "../channel.js";
import { debugLog, describeError } from "../debug.js";
import { channels as diagnostics } from "../diagnostic-channels.js";
import type { TensorPipeError } from "../errors.js";
import { type FlightEvent, FlightRecorder } from "../flight-recorder.js";
import type { Descriptor } from "../message.js";
import { describePairs } from "../negotiation.js";
import type { PathReport } from "../path-report.js";
import type { DevicePairChoice } from "../protocol/handshake.js";
import { PipeCounters } from "../stats.js";
import { DONE } from "../transport.js";
import type { PipeState } from "./lifecycle.js";
import type { PartMemory } from "./landing.js";
import type { OutgoingMessage } from "./outgoing.js";
import type { Pipe } from "./pipe.js";
import type { ChannelRoutes } from "./routes.js";

const log = debugLog("pipe");
const noop = (): void => undefined;

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
  /** What each side offered, what was chosen, and why not the rest (as `pipe.path`). */
  path: PathReport;
}

/** A pipe ended; `error` says why (ERR_TP_CLOSED when this side closed it). */
export interface PipeCloseMessage {
  /** The pipe that ended. */
  pipe: Pipe;
  /** Why it ended. */
  error: TensorPipeError;
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

/**
 * A write or read finished (`tensorpipe:message:done`): its bytes, the
 * channel of its first tensor, and how long it took.
 */
export interface MessageDoneMessage {
  /** The pipe. */
  pipe: Pipe;
  /** "write": all its bytes left this process's memory; "read": all of them landed. */
  direction: "write" | "read";
  /** Payload and tensor bytes. */
  bytes: number;
  /** The channel of its first tensor; "" for a message without tensors (or one whose target the peer picks). */
  channel: string;
  /** From write() or read() to the end, in seconds. */
  seconds: number;
}

/** The observers of one pipe. */
export class PipeObserver {
  /** Live counters; pipe.stats() copies them. */
  readonly counters = new PipeCounters();
  private readonly recorder?: FlightRecorder;
  private routes!: ChannelRoutes;

  constructor(
    private readonly pipe: Pipe,
    flightRecorder: number,
    handshakeEvents: readonly FlightEvent[],
  ) {
    if (flightRecorder > 0) this.recorder = new FlightRecorder(flightRecorder, handshakeEvents);
  }

  /** The pipe's channels, once made (they count into these counters). */
  attach(routes: ChannelRoutes): void {
    this.routes = routes;
  }

  /** The pipe's last events. */
  events(): FlightEvent[] {
    return this.recorder?.events() ?? [];
  }

  /** Whether messageDone has subscribers: then write() and read() note when they start. */
  get timing(): boolean {
    return diagnostics.messageDone.hasSubscribers;
  }

  opened(side: "connect" | "listen", path: PathReport): void {
    const pipe = this.pipe;
    if (log.enabled) log("pipe to %s open (%s side): transport %s, channels %s", pipe.peer, side, pipe.transport, describePairs(pipe.channelForDevicePair));
    if (diagnostics.pipeOpen.hasSubscribers) {
      diagnostics.pipeOpen.publish({
        pipe,
        side,
        peer: pipe.peer,
        transport: pipe.transport,
        channels: pipe.channelForDevicePair,
        path,
      } satisfies PipeOpenMessage);
    }
  }

  /** write() took `m`; `sent` settles when it is done (DONE: at once). */
  wrote(m: OutgoingMessage, sent: Promise<void>, started: number): void {
    this.counters.messagesSent++;
    this.counters.bytesSent += m.bytes;
    if (diagnostics.messageWrite.hasSubscribers) diagnostics.messageWrite.publish(this.sizesOfOutgoing(m));
    this.recorder?.write(m.bytes, sent !== DONE);
    if (started > 0) this.publishDone("write", sent, m.bytes, m.tensors.length > 0 ? this.sentOn(m, 0) : "", started);
  }

  /** A tensor went to `channel` to be sent. */
  sending(channel: Channel, length: number): void {
    const counted = this.routes.stats(channel);
    counted.tensorsSent++;
    counted.bytesSent += length;
  }

  /** A write that did not finish at once finished. */
  written(): void {
    this.recorder?.written();
  }

  /** A descriptor frame of `bytes` came. */
  descriptor(bytes: number): void {
    this.recorder?.descriptor(bytes);
  }

  /** read() was given `memory` for the message of `d`; the bytes it takes, and `received` settles when they have landed. */
  reading(d: Descriptor, memory: PartMemory, bytes: number, received: Promise<unknown>, started: number): void {
    this.counters.messagesReceived++;
    this.counters.bytesReceived += bytes;
    if (diagnostics.messageRead.hasSubscribers) diagnostics.messageRead.publish(this.sizesOfIncoming(d, memory));
    this.recorder?.read(bytes, received !== DONE);
    if (started > 0) {
      const channel = d.tensors.length > 0 ? this.routes.name(this.routes.between(memory.tensorDevice(0), d.tensors[0]!.sourceDevice)) : "";
      this.publishDone("read", received, bytes, channel, started);
    }
  }

  /** A tensor of `length` bytes is to land from `channel`. */
  receiving(channel: Channel, length: number): void {
    const counted = this.routes.stats(channel);
    counted.tensorsReceived++;
    counted.bytesReceived += length;
  }

  /** A read that did not finish at once finished. */
  received(): void {
    this.recorder?.received();
  }

  /** An operation was refused for its own reason: counted, the pipe goes on. */
  refused(err: TensorPipeError): void {
    this.counters.countError(err.code);
    this.recorder?.note("error", `refused: ${describeError(err)}`);
  }

  /** The pipe changed state. */
  transition(to: PipeState, error: TensorPipeError | undefined): void {
    if (to === "open" || to === "draining" || !error) return;
    if (to === "failed") this.counters.countError(error.code);
    const recorder = this.recorder;
    if (recorder) {
      if (to === "failed") recorder.note("error", describeError(error));
      else recorder.note("closed", to === "ended" ? `ended by the peer between messages (${describeError(error)})` : "closed here");
      // An earlier end may have given it its own.
      error.flightRecord ??= recorder.events();
    }
    if (log.enabled) log("pipe to %s closed: %s", this.pipe.peer, to === "closed" ? "closed here" : describeError(error));
    if (diagnostics.pipeClose.hasSubscribers) diagnostics.pipeClose.publish({ pipe: this.pipe, error } satisfies PipeCloseMessage);
  }

  /** The name of the channel that sends tensor `i` of `m`; "" while the peer has yet to pick its target. */
  private sentOn(m: OutgoingMessage, i: number): string {
    const target = m.targets[i];
    return target ? this.routes.name(this.routes.between(m.sources[i]!, target)) : "";
  }

  /** Publishes on `tensorpipe:message:done` once `settled` has, if it succeeds. */
  private publishDone(direction: "write" | "read", settled: Promise<unknown>, bytes: number, channel: string, started: number): void {
    const publish = () =>
      diagnostics.messageDone.publish({
        pipe: this.pipe,
        direction,
        bytes,
        channel,
        seconds: (performance.now() - started) / 1000,
      } satisfies MessageDoneMessage);
    if (settled === DONE) publish();
    else settled.then(publish, noop);
  }

  private sizesOfOutgoing(m: OutgoingMessage): MessageSizesMessage {
    return {
      pipe: this.pipe,
      metadataLength: m.metadata.length,
      payloads: m.payloads.map((p) => p.data.byteLength),
      tensors: m.tensors.map((_, i) => ({ length: m.lengths[i]!, channel: this.sentOn(m, i) })),
    };
  }

  private sizesOfIncoming(d: Descriptor, memory: PartMemory): MessageSizesMessage {
    return {
      pipe: this.pipe,
      metadataLength: d.metadata.length,
      payloads: d.payloads.map((p) => p.length),
      tensors: d.tensors.map((t, i) => ({ length: t.length, channel: this.routes.name(this.routes.between(memory.tensorDevice(i), t.sourceDevice)) })),
    };
  }
}
