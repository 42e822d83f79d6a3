/**
 * The outbound half of a pipe: write() checked and encoded once, its
 * descriptor and payloads on the main connection, its tensors on their
 * channels in message order (WriteOperation), and the DescriptorReplies
 * that name the devices the peer picks.
 */
import { type Device, bufferDevice, deviceKey } from "../device.js";
import { ErrorCode, TensorPipeError, protocolError } from "../errors.js";
import type { Message, MessagePayload, MessageTensor } from "../message.js";
import { NopWriter } from "../nop/writer.js";
import { type FailureNotice, decodeReplyFrame } from "../protocol/failure-notice.js";
import { decodeDescriptorReply } from "../protocol/message.js";
import { type Connection, DONE } from "../transport.js";
import type { PipeObserver } from "./observer.js";
import { OutgoingMessage, targetOf, tensorLength } from "./outgoing.js";
import type { ChannelRoutes } from "./routes.js";
import { WriteOperation } from "./write-operation.js";

const noop = (): void => undefined;

/** What the writer needs of its pipe. */
export interface WriterHost {
  readonly main: Connection;
  readonly reply: Connection;
  readonly routes: ChannelRoutes;
  readonly observer: PipeObserver;
  readonly maxDescriptorLength: number;
  /** The pipe's error once it has one. */
  readonly failure: TensorPipeError | undefined;
  /** Rejects with the pipe's final error, once it has one. */
  ended(): Promise<never>;
  /** Whether the pipe has its final error (failure may be a peer's end held before it). */
  readonly over: boolean;
  /** Whether the peer is of this library: it may send a failure notice on the reply connection. */
  readonly peerIsOurs: boolean;
  /** Fails the pipe with `e` (the first error wins). */
  fail(e: unknown): void;
  /** The peer told why it failed the pipe. */
  peerFailed(notice: FailureNotice): void;
  /** The reply connection ended (`e`) with no write waiting on it. */
  replyEnded(e: unknown): void;
  /** A write that did not finish at once settled. */
  writeSettled(): void;
}

/** One pipe's outbound half. */
export class Writer {
  /** Writes taken that have not finished. */
  inFlight = 0;
  /** Whether the last write's tensors did not all go at once (a timeout then names the likely cause). */
  tensorsWaited = false;
  /** Writes whose tensors are not yet all with their channels, in message order. */
  private readonly queue: WriteOperation[] = [];
  private replyReading = false;
  private noticeAwaited = false;
  private readonly outgoing = new OutgoingMessage();
  // Reused message after message while writes finish at once (DONE): the
  // hot path then allocates nothing for the descriptor and its frames.
  private readonly encoder = new NopWriter(256);
  private mainFrames: ArrayBufferView[] = [];
  private readonly settled = (): void => {
    this.inFlight--;
    this.host.observer.written();
    this.host.writeSettled();
  };
  private readonly failed = (e: unknown): Promise<never> => {
    // Still counted while it fails the pipe: it is one of the writes unfinished.
    try {
      this.host.fail(e);
      if (this.host.over) throw this.host.failure;
    } finally {
      this.inFlight--;
      this.host.writeSettled();
    }
    // Held: a peer of this library may still say why it went.
    return this.host.ended();
  };

  constructor(private readonly host: WriterHost) {}

  /** Whether a write waits for the peer to name its tensors' devices. */
  get awaitsTargets(): boolean {
    return this.queue.some((op) => op.state === "targets awaited");
  }

  /**
   * Checks and encodes `message`, all of it, before anything is sent;
   * throws (and sends nothing) where write() would refuse it.
   */
  prepare(message: Message): OutgoingMessage {
    const m = this.outgoing.check(message, this.host.routes);
    m.encode(this.encoder, this.host.maxDescriptorLength);
    return m;
  }

  /**
   * Sends the message prepare() took: its tensors first where their
   * targets are known (when the reader learns of them, their bytes are
   * already at its end), then its descriptor and payloads. DONE when every
   * byte left at once.
   */
  send(m: OutgoingMessage, started: number): Promise<void> {
    let tensorsSent: Promise<void> = DONE;
    const tensors = m.tensors;
    if (tensors.length > 0) {
      if (m.missingTargets === 0 && this.queue.length === 0) {
        tensorsSent = this.sendTensors(tensors)!;
      } else {
        const op = new WriteOperation(tensors, m.missingTargets);
        this.queue.push(op);
        this.advance();
        if (op.state === "targets awaited") this.readReplies();
        tensorsSent = op.done;
      }
    }
    this.tensorsWaited = tensorsSent !== DONE;
    const written = this.writeMain(m.payloads);
    const all = tensorsSent === DONE ? written : written === DONE ? tensorsSent : Promise.all([written, tensorsSent]).then(noop);
    this.host.observer.wrote(m, all, started);
    m.clear();
    if (all === DONE) return DONE;
    this.inFlight++;
    return all.then(this.settled, this.failed);
  }

  /** Fails every write whose tensors wait. */
  fail(err: TensorPipeError): void {
    for (const op of this.queue.splice(0)) op.fail(err);
  }

  /** The descriptor and the payloads, on the main connection. */
  private writeMain(payloads: readonly MessagePayload[]): Promise<void> {
    // Written in place: an array emptied and refilled would get a fresh backing store each time.
    const frames = this.mainFrames;
    let n = 0;
    frames[n++] = this.encoder.finish();
    for (const p of payloads) frames[n++] = p.data;
    if (frames.length !== n) frames.length = n;
    const written = this.host.main.write(frames);
    if (written === DONE) {
      // Not kept alive by the pipe: the payloads are the caller's.
      for (let i = 1; i < n; i++) frames[i] = frames[0]!;
    } else {
      // The connection holds on to them until the write settles.
      this.mainFrames = [];
      this.encoder.hold();
    }
    return written;
  }

  /**
   * Moves the queued writes forward, in order: each whose targets are
   * known goes to its channels once those before it have. The one place a
   * WriteOperation changes state, but for failing.
   */
  private advance(): void {
    while (this.queue.length > 0 && !this.host.failure) {
      const head = this.queue[0]!;
      if (head.state === "targets awaited") return;
      this.queue.shift();
      const sent = this.sendTensors(head.tensors, head.replyDevices);
      if (sent === undefined) {
        head.fail(this.host.failure);
        return;
      }
      head.sending(sent);
    }
  }

  /**
   * Hands each tensor to its channel, the target from the tensor or else
   * from `replyDevices` in order. DONE when every channel finished at once;
   * undefined when the peer asked for a device no channel serves (the pipe
   * has failed).
   */
  private sendTensors(tensors: readonly MessageTensor[], replyDevices?: readonly Device[]): Promise<void> | undefined {
    let pending: Promise<void>[] | undefined;
    let r = 0;
    for (const t of tensors) {
      const source = bufferDevice(t.buffer);
      const target = targetOf(t, source) ?? replyDevices![r++]!;
      const channel = this.host.routes.between(source, target);
      if (!channel) {
        this.host.fail(
          new TensorPipeError(ErrorCode.NEGOTIATION, `peer asked for a tensor on ${deviceKey(target)} but no channel joins ${deviceKey(source)} to it`),
        );
        return undefined;
      }
      const length = tensorLength(t);
      this.host.observer.sending(channel, length);
      const sent = channel.send(t.buffer, length);
      if (sent !== DONE) (pending ??= []).push(sent);
    }
    if (pending === undefined) return DONE;
    return pending.length === 1 ? pending[0]! : Promise.all(pending).then(noop);
  }

  /**
   * Reads the reply connection to its next frame or its end, for the
   * notice a peer of this library sends there when it fails the pipe
   * (protocol/failure-notice.ts). Whether there is one to wait for.
   */
  awaitNotice(): boolean {
    if (!this.host.peerIsOurs) return false;
    this.noticeAwaited = true;
    this.readReplies();
    return this.replyReading;
  }

  /** Reads the peer's DescriptorReplies while a write waits for one, or a notice while one is awaited. */
  private readReplies(): void {
    // Held, the pipe still listens there: the notice it waits for comes on this connection.
    if (this.replyReading || this.host.over) return;
    if (!this.noticeAwaited && !this.awaitsTargets) return;
    this.replyReading = true;
    this.host.reply.read(this.host.maxDescriptorLength).then(
      (bytes) => {
        this.replyReading = false;
        if (this.host.over) return;
        try {
          if (this.host.peerIsOurs) {
            const frame = decodeReplyFrame(bytes);
            if ("notice" in frame) {
              this.host.peerFailed(frame.notice);
              return;
            }
            this.targetsCame(frame.reply.targetDevices);
          } else {
            this.targetsCame(decodeDescriptorReply(bytes).targetDevices);
          }
        } catch (e) {
          this.host.fail(e);
          return;
        }
        this.advance();
        this.readReplies();
      },
      (e) => {
        this.replyReading = false;
        // Its end is the peer's, decided on main; it fails the pipe only under a write that waits on it.
        if (this.awaitsTargets) this.host.fail(e);
        else this.host.replyEnded(e);
      },
    );
  }

  private targetsCame(targetDevices: Device[]): void {
    const waiting = this.queue.find((op) => op.state === "targets awaited");
    if (!waiting) throw protocolError("a DescriptorReply came with no write waiting for one");
    if (targetDevices.length !== waiting.missingTargets) {
      throw protocolError(`DescriptorReply names ${targetDevices.length} device(s) for ${waiting.missingTargets} tensor(s)`);
    }
    waiting.targetsCame(targetDevices);
  }
}
