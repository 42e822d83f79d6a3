/**
 * The machinery behind a Pipe: its state, its two halves and the watch on
 * its peer's end, joined in one place. Pipe keeps the public API alone.
 */
import type { Channel } from "../channel.js";
import { ErrorCode, TensorPipeError, fromNativeError } from "../errors.js";
import type { DescriptorLimits } from "../protocol/message.js";
import type { Connection } from "../transport.js";
import { type FinalState, PipeLifecycle, type PipeState } from "./lifecycle.js";
import { PipeObserver } from "./observer.js";
import type { PipeParts } from "./parts.js";
import { PeerEnd, type PeerEndHost } from "./peer-end.js";
import type { Pipe } from "./pipe.js";
import { Reader, type ReaderHost } from "./reader.js";
import { ChannelRoutes } from "./routes.js";
import { Writer, type WriterHost } from "./writer.js";

/** One pipe's state and operations. */
export class PipeEngine implements ReaderHost, WriterHost, PeerEndHost {
  readonly main: Connection;
  readonly reply: Connection;
  readonly peer: string;
  readonly maxDescriptorLength: number;
  readonly limits: Readonly<DescriptorLimits>;
  readonly observer: PipeObserver;
  readonly routes: ChannelRoutes;
  readonly lifecycle: PipeLifecycle;
  readonly reader: Reader;
  readonly writer: Writer;
  readonly end: PeerEnd;
  private readonly channels: Map<string, Channel>;

  constructor(pipe: Pipe, parts: PipeParts) {
    this.main = parts.main;
    this.reply = parts.reply;
    this.peer = parts.peer;
    this.channels = parts.channels;
    this.maxDescriptorLength = parts.options.maxDescriptorLength;
    this.limits = parts.options.limits;
    this.observer = new PipeObserver(pipe, parts.options.flightRecorder, parts.events);
    this.routes = new ChannelRoutes(parts.pairs, parts.channels, this.observer.counters);
    this.observer.attach(this.routes);
    this.lifecycle = new PipeLifecycle((from, to, error) => this.transition(from, to, error));
    this.reader = new Reader(this);
    this.writer = new Writer(this);
    const others = [{ what: "reply", connection: this.reply }];
    for (const [name, conns] of parts.channelConnections ?? []) for (const connection of conns) others.push({ what: `${name} channel`, connection });
    this.end = new PeerEnd(this, this.main, others);
    // Writes waiting for a DescriptorReply never finish once its connection has gone.
    this.reply.closed.then((e) => e && !this.over && this.writer.awaitsTargets && this.fail(e));
    this.reader.fetch();
  }

  get failure(): TensorPipeError | undefined {
    return this.lifecycle.error;
  }

  get over(): boolean {
    return this.lifecycle.isOver;
  }

  get draining(): boolean {
    return this.lifecycle.state === "draining";
  }

  get writesInFlight(): number {
    return this.writer.inFlight;
  }

  get readsInFlight(): number {
    return this.reader.inFlight;
  }

  get holdsMessage(): boolean {
    return this.reader.holdsMessage;
  }

  get messagesReceived(): number {
    return this.observer.counters.messagesReceived;
  }

  /** Why a new operation cannot start: the pipe's end, or, draining, that the peer has gone. */
  get refusal(): TensorPipeError | undefined {
    return this.lifecycle.error ?? (this.draining ? this.end.refusal : undefined);
  }

  describe(e: unknown): TensorPipeError {
    if (e instanceof TensorPipeError) return e;
    return fromNativeError(e, `pipe to ${this.peer}`);
  }

  /** Ends the pipe in `to` with `e`; the first end wins. */
  fail(e: unknown, to: FinalState = "failed"): void {
    if (this.over) return;
    let err = this.describe(e);
    // However it was learnt (main's end, a channel's connection, a write), a
    // peer gone with writes of this side unfinished is one error, said once.
    if (to === "failed" && err.code === ErrorCode.PEER_CLOSED && this.writer.inFlight > 0 && !this.end.isDecision(err)) err = this.end.unfinishedWrites(err);
    this.lifecycle.finish(to, err);
  }

  mainEnded(err: TensorPipeError): void {
    this.end.mainEnded(err);
  }

  readProgressed(): void {
    this.end.check();
  }

  writeSettled(): void {
    this.end.check();
  }

  drain(): void {
    this.lifecycle.drain();
  }

  decided(err: TensorPipeError): void {
    this.reader.ended(err);
  }

  finish(err: TensorPipeError, clean: boolean): void {
    this.fail(err, clean ? "ended" : "failed");
  }

  private transition(_from: PipeState, to: PipeState, error: TensorPipeError | undefined): void {
    this.observer.transition(to, error);
    if (!error) return;
    this.end.stop();
    this.reader.fail(error);
    this.writer.fail(error);
    this.main.close(error);
    this.reply.close(error);
    for (const c of this.channels.values()) c.close(error);
  }
}
