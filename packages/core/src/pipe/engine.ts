/**
 * The machinery behind a Pipe: its state, its two halves and the watch on
 * its peer's end, joined in one place. Pipe keeps the public API alone.
 */
import type { Channel } from "../channel.js";
import { ErrorCode, TensorPipeError, fromNativeError } from "../errors.js";
import type { DescriptorLimits } from "../protocol/message.js";
import { type FailureNotice, encodeFailureNotice } from "../protocol/failure-notice.js";
import { type Connection, DONE } from "../transport.js";
import { type FinalState, PipeLifecycle, type PipeState } from "./lifecycle.js";
import { PipeObserver } from "./observer.js";
import type { PipeParts } from "./parts.js";
import { PeerEnd, type PeerEndHost } from "./peer-end.js";
import type { Pipe } from "./pipe.js";
import { Reader, type ReaderHost } from "./reader.js";
import { ChannelRoutes } from "./routes.js";
import { Writer, type WriterHost } from "./writer.js";

/**
 * How long a pipe whose peer is of this library, having seen the peer go,
 * waits for the reply connection to say why (a failure notice) before it
 * fails with what it saw; and how long a failing end keeps the reply
 * connection open for its notice to leave.
 */
export const NOTICE_WAIT_MS = 1000;

/**
 * What a peer of this library is told of: what this side found wrong (data,
 * the peer's bytes, a system error, a proof). Not the peer's own end, nor
 * what the caller here chose (a close, an abort, a deadline), which the
 * peer sees as it always has: the pipe closed, a message cut short.
 */
const TOLD: ReadonlySet<string> = new Set<string>([
  ErrorCode.DATA_CORRUPTED,
  ErrorCode.PROTOCOL,
  ErrorCode.SYSTEM,
  ErrorCode.NEGOTIATION,
  ErrorCode.PERMISSION_DENIED,
  ErrorCode.NOT_VIABLE,
]);

function toBeTold(err: TensorPipeError): boolean {
  return TOLD.has(err.code);
}

/**
 * A wait (a second at most) for a peer of this library's failure notice:
 * what is held until it comes or the reply connection ends, a failure or
 * main's end.
 */
interface AwaitedNotice {
  timer: NodeJS.Timeout;
  held?: TensorPipeError;
  mainEnd?: TensorPipeError;
}

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
  readonly peerIsOurs: boolean;
  private readonly channels: Map<string, Channel>;
  /** The peer's notice, once one came: this side does not tell it back. */
  private notice?: TensorPipeError;
  /** While the reply connection may still say why the peer went. */
  private awaiting?: AwaitedNotice;

  constructor(pipe: Pipe, parts: PipeParts) {
    this.main = parts.main;
    this.reply = parts.reply;
    this.peer = parts.peer;
    this.peerIsOurs = parts.path.peerReported;
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

  /** The pipe's error: its final one, or, while a peer's end is held, that end (nothing goes on past it). */
  get failure(): TensorPipeError | undefined {
    return this.lifecycle.error ?? this.awaiting?.held;
  }

  /** Rejects with the pipe's final error: at once where it is over, else (a peer's end held for its notice) once it is. */
  ended(): Promise<never> {
    return this.lifecycle.ended();
  }

  get settled(): boolean {
    return this.failure !== undefined;
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
    return this.failure ?? (this.draining ? this.end.refusal : undefined);
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
    // Held, the first end waits for the peer's word: only a close here goes first.
    if (this.awaiting?.held && to !== "closed") return;
    if (to === "failed" && this.holds(err)) return;
    this.lifecycle.finish(to, err);
  }

  /** The peer told why it failed the pipe: that is the error, whatever this side saw of its going. */
  peerFailed(notice: FailureNotice): void {
    if (this.over) return;
    this.notice = new TensorPipeError(notice.code, `the peer failed the pipe: ${notice.message}`, { where: `pipe to ${this.peer}` });
    this.release(this.notice);
  }

  replyEnded(_e: unknown): void {
    this.release();
  }

  /**
   * The main connection ended: from a peer of this library, once the reply
   * connection has been read to a notice or its end (or a second has
   * passed), since a peer that failed the pipe said why there first.
   */
  mainEnded(err: TensorPipeError): void {
    if (this.awaiting?.mainEnd || this.settled) return;
    if (this.awaitNotice()) this.awaiting!.mainEnd = err;
    else this.end.mainEnded(err);
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

  /**
   * Whether `err`, the peer seen gone, waits for the reply connection: a
   * peer of this library that failed the pipe tells why there before it
   * closes, and its closing may show first on another connection.
   */
  private holds(err: TensorPipeError): boolean {
    const gone = err.code === ErrorCode.PEER_CLOSED || err.code === ErrorCode.CONNECTION_RESET;
    if (!gone || !this.awaitNotice()) return false;
    this.awaiting!.held = err;
    return true;
  }

  /** Waits (a second at most) for the reply connection's notice or end, where the peer may send one; whether it does. */
  private awaitNotice(): boolean {
    if (this.awaiting) return true;
    if (!this.writer.awaitNotice()) return false;
    const timer = setTimeout(() => this.release(), NOTICE_WAIT_MS);
    timer.unref();
    this.awaiting = { timer };
    return true;
  }

  /** Ends the pipe with the peer's notice, or else goes on with the end held or main's end put off. */
  private release(notice?: TensorPipeError): void {
    const awaited = this.stopAwaiting();
    if (notice) this.lifecycle.finish("failed", notice);
    else if (awaited?.held) this.lifecycle.finish("failed", awaited.held);
    else if (awaited?.mainEnd) this.end.mainEnded(awaited.mainEnd);
  }

  private stopAwaiting(): AwaitedNotice | undefined {
    const awaited = this.awaiting;
    if (awaited) clearTimeout(awaited.timer);
    this.awaiting = undefined;
    return awaited;
  }

  private transition(_from: PipeState, to: PipeState, error: TensorPipeError | undefined): void {
    this.observer.transition(to, error);
    if (!error) return;
    this.stopAwaiting();
    this.end.stop();
    this.reader.fail(error);
    this.writer.fail(error);
    this.main.close(error);
    for (const c of this.channels.values()) c.close(error);
    this.tell(error);
  }

  /** Tells a peer of this library why this side failed the pipe, then closes the reply connection. */
  private tell(error: TensorPipeError): void {
    if (!this.peerIsOurs || error === this.notice || !toBeTold(error)) {
      this.reply.close(error);
      return;
    }
    const sent = this.reply.write([encodeFailureNotice(error)]);
    if (sent === DONE) {
      this.reply.close(error);
      return;
    }
    const timer = setTimeout(() => this.reply.close(error), NOTICE_WAIT_MS);
    timer.unref();
    sent.then(
      () => {
        clearTimeout(timer);
        this.reply.close(error);
      },
      () => clearTimeout(timer),
    );
  }
}
