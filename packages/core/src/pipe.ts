/**
 * One end of a pipe: an ordered stream of messages in each direction over a
 * main connection (descriptors and payloads), a reply connection
 * (DescriptorReply) and one channel per chosen device pair (tensors).
 */
import { type Deadline, type OperationOptions, operationDeadline, raceSignal } from "./abort.js";
import type { Channel } from "./channel.js";
import { debugLog, describeError } from "./debug.js";
import { Deferred } from "./deferred.js";
import { channels as diagnostics } from "./diagnostic-channels.js";
import type { Device, TensorBuffer } from "./device.js";
import { bufferDevice, CPU_DEVICE, deviceKey, sameDevice } from "./device.js";
import { ErrorCode, TensorPipeError, closedError, fromNativeError, protocolError } from "./errors.js";
import type { Allocation, Descriptor, Message, MessagePayload, MessageTensor, ReceivedMessage } from "./message.js";
import { allocationParts, badPayload, checkDevice, checkMessageShape, checkTensorBuffer } from "./message-check.js";
import { type MessageMemory, allocateMessage } from "./message-memory.js";
import { describePairs, pairKey } from "./negotiation.js";
import { NopWriter } from "./nop.js";
import type { PathReport } from "./path-report.js";
import { type FlightEvent, FlightRecorder } from "./flight-recorder.js";
import type { DevicePairChoice } from "./protocol.js";
import {
  type DescriptorLimits,
  decodeDescriptor,
  decodeDescriptorReply,
  encodeDescriptorReply,
  writeDescriptorHead,
  writePayloadDescriptor,
  writeTensorCount,
  writeTensorDescriptor,
} from "./protocol.js";
import { type ChannelStats, PipeCounters, type PipeStats } from "./stats.js";
import { type Connection, DONE } from "./transport.js";

const log = debugLog("pipe");

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

/** Limits a pipe enforces on what its peer sends. */
export interface PipeOptions {
  /** Largest descriptor frame accepted from the peer. */
  maxDescriptorLength: number;
  /** What one message's descriptor may announce. */
  limits: Readonly<DescriptorLimits>;
  /** Events the pipe's flight recorder keeps (0: none). */
  flightRecorder: number;
}

/** What a pipe is made of once the handshake is done (built by Context). */
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
  /** Which end of the handshake this was. */
  side: "connect" | "listen";
  /** Limits on what the peer sends. */
  options: PipeOptions;
  /** What each side offered, what was chosen, and why not the rest. */
  path: PathReport;
  /** The handshake's steps, for the flight recorder. */
  events: readonly FlightEvent[];
}

/** Tensors of a message that wait for the peer's DescriptorReply, or for an earlier message's. */
interface PendingTensorSend {
  tensors: readonly MessageTensor[];
  missingTargets: number;
  replyDevices?: Device[];
  done: Deferred<void>;
}

function invalid(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.INVALID_ARG, message);
}

function tensorLength(t: MessageTensor, i: number): number {
  const length = t.length ?? t.buffer.byteLength;
  if (!Number.isSafeInteger(length) || length < 0 || length > t.buffer.byteLength) {
    throw invalid(`tensor ${i}: length must be a whole number of bytes from 0 to its buffer's ${t.buffer.byteLength}, got ${String(length)}`);
  }
  return length;
}

const noop = (): void => undefined;

/** Where `t` goes at the peer: as given; the CPU for a CPU tensor given none; undefined for the peer to choose. */
function targetOf(t: MessageTensor, source: Device): Device | undefined {
  if (t.targetDevice !== undefined) return t.targetDevice ?? undefined;
  return source === CPU_DEVICE ? CPU_DEVICE : undefined;
}

/** How long reads in flight when the peer ended the pipe may still take to finish. */
const ENDED_READ_GRACE_MS = 5000;

/**
 * How often, once another of the pipe's connections has ended, the pipe
 * looks whether main has ended too: a peer closing its pipe closes them
 * all, in any order, and main's end comes behind what it still carries.
 */
const CUT_CONNECTION_CHECK_MS = 1000;

/** The errors made for a peer's end with writes of this side unfinished, not to be wrapped again. */
const UNFINISHED = new WeakSet<TensorPipeError>();

/** A write whose tensors were not all sent at once, as its timeout or abort names it: the likeliest cause is a peer that is not reading. */
const WAITING_WRITE = "pipe write (a large tensor goes out only as the peer reads it: is the peer reading, and not itself waiting on this write?)";

/** One end of a pipe: ordered messages each way. Made by Context.connect() and Listener.accept(); write() sends, readDescriptor() then read() receive into memory the caller provides. */
export class Pipe implements AsyncIterable<ReceivedMessage> {
  /** The transport negotiated ("uv", "shm", ...). */
  readonly transport: string;
  /** The channel negotiated for each (device here, device there) pair. */
  readonly channelForDevicePair: readonly DevicePairChoice[];
  /** The peer: the URL dialled, or the address the pipe came from. */
  readonly peer: string;
  /**
   * The path negotiation took, from this end: what each side offered, the
   * transport and channels chosen, and why every other one was not.
   */
  readonly path: PathReport;
  /** Settles (never rejects) with the error that ended the pipe. */
  readonly closed: Promise<TensorPipeError>;

  private readonly main: Connection;
  private readonly reply: Connection;
  private readonly channels: Map<string, Channel>;
  private readonly channelByPair = new Map<string, Channel>();
  /** The channel from CPU to CPU, found without building a key. */
  private cpuChannel?: Channel;
  /** @internal Live counters; stats() copies them. */
  readonly counters = new PipeCounters();
  /** The last events, when ContextOptions.flightRecorder keeps any. */
  private readonly recorder?: FlightRecorder;
  /** Each channel's name and counters, found from the channel on the hot path. */
  private readonly channelInfo = new Map<Channel, { name: string; stats: ChannelStats }>();
  /** Payload and tensor bytes of the message encodeDescriptor took last. */
  private encodedBytes = 0;
  private readonly options: PipeOptions;
  // Reused message after message while writes finish at once (DONE): the
  // hot path then allocates nothing for the descriptor and its frames.
  private readonly encoder = new NopWriter(256);
  private mainFrames: ArrayBufferView[] = [];
  private failure?: TensorPipeError;
  private readonly closedDeferred = new Deferred<TensorPipeError>();

  private readonly tensorSends: PendingTensorSend[] = [];
  private replyReading = false;

  private readonly descriptorWaiters: Deferred<Descriptor>[] = [];
  private prefetched?: Descriptor;
  /** Handed to the reader, waiting for read(allocation). */
  private current?: Descriptor;
  /** Set when the peer ended the stream between messages. */
  private ended?: TensorPipeError;
  /** Whether it did with no write of this side unfinished. */
  private endedCleanly = true;
  /** Fails reads still in flight that long after the peer's end. */
  private endedReads?: NodeJS.Timeout;
  private readsInFlight = 0;
  // Bound once, not per message.
  /** Writes taken that have not finished: a peer that ends the stream meanwhile did not end it cleanly. */
  private writesInFlight = 0;
  private readonly writeSettled = (): void => {
    this.writesInFlight--;
    this.recorder?.written();
  };
  private readonly writeFailed = (e: unknown): never => {
    // Still counted while it fails the pipe: it is one of the writes unfinished.
    try {
      return this.onOperationError(e);
    } finally {
      this.writesInFlight--;
    }
  };
  private readonly readSettled = (): void => {
    this.recorder?.received();
    this.readsInFlight--;
    this.maybeFinishEnded();
  };
  private readonly readFailed = (e: unknown): never => {
    this.readsInFlight--;
    try {
      const err = this.describe(e);
      // The peer left with part of the message unsent: a truncated message,
      // as a frame cut short is, whichever transport's frames it fell between.
      if (err.code !== ErrorCode.PEER_CLOSED || this.failure) return this.onOperationError(err);
      return this.onOperationError(
        new TensorPipeError(ErrorCode.CONNECTION_RESET, "truncated message: the peer closed the pipe in the middle of a message, the rest of it never came", {
          where: `pipe to ${this.peer}`,
          errno: err.errno,
          syscall: err.syscall,
          cause: err,
        }),
      );
    } finally {
      this.maybeFinishEnded();
    }
  };
  private readonly onDescriptor = (err: Error | null, bytes?: Uint8Array): void => {
    if (err) {
      this.onDescriptorError(err);
      return;
    }
    this.onDescriptorFrame(bytes!);
  };
  private readonly onDescriptorFrame = (bytes: Uint8Array): void => {
    if (this.failure) return;
    let d: Descriptor;
    try {
      d = decodeDescriptor(bytes, this.options.limits);
      this.checkReceivable(d);
    } catch (e) {
      this.fail(e);
      return;
    }
    this.recorder?.descriptor(bytes.byteLength);
    const waiter = this.descriptorWaiters.shift();
    if (waiter) {
      this.current = d;
      waiter.resolve(d);
    } else {
      this.prefetched = d;
    }
  };
  private readonly onDescriptorError = (e: unknown): void => {
    const err = this.describe(e);
    if (err.code === ErrorCode.PEER_CLOSED) this.endStream(err);
    else if (err.code === ErrorCode.PROTOCOL && /exceeds the limit/.test(err.message)) {
      // The transport knows the number; this side's option that sets it is named here.
      this.fail(
        new TensorPipeError(ErrorCode.PROTOCOL, `descriptor ${err.message}: raise ContextOptions.maxControlFrameLength on this side if that is meant`, {
          cause: err,
        }),
      );
    } else this.fail(err);
  };

  constructor(parts: PipeParts) {
    this.transport = parts.transport;
    this.main = parts.main;
    this.reply = parts.reply;
    this.channels = parts.channels;
    this.channelForDevicePair = parts.pairs;
    this.peer = parts.peer;
    this.path = parts.path;
    this.options = parts.options;
    if (parts.options.flightRecorder > 0) this.recorder = new FlightRecorder(parts.options.flightRecorder, parts.events);
    this.closed = this.closedDeferred.promise;
    for (const p of parts.pairs) {
      const channel = this.channels.get(p.channel);
      if (channel) this.channelByPair.set(pairKey(p.local, p.remote), channel);
    }
    this.cpuChannel = this.channelByPair.get(pairKey(CPU_DEVICE, CPU_DEVICE));
    for (const [name, channel] of this.channels) this.channelInfo.set(channel, { name, stats: this.counters.channel(name) });
    this.fetchDescriptor();
    // A connection that fails while idle: the peer is gone even if nobody
    // is reading or writing right now.
    this.main.closed.then((e) => e && !this.failure && this.endStream(this.describe(e)));
    this.reply.closed.then((e) => e && !this.failure && this.tensorSends.length > 0 && this.fail(e));
    this.reply.closed.then((e) => e && this.connectionCut("reply", e));
    for (const [name, conns] of parts.channelConnections ?? []) {
      for (const c of conns) c.closed.then((e) => e && this.connectionCut(`${name} channel`, e));
    }
    if (log.enabled) {
      log("pipe to %s open (%s side): transport %s, channels %s", this.peer, parts.side, this.transport, describePairs(parts.pairs));
    }
    if (diagnostics.pipeOpen.hasSubscribers) {
      diagnostics.pipeOpen.publish({ pipe: this, side: parts.side, peer: this.peer, transport: this.transport, channels: parts.pairs, path: this.path });
    }
  }

  /**
   * The pipe's last events, oldest first: the handshake's steps, the path,
   * each message's size and time, errors (ContextOptions.flightRecorder;
   * empty when it is 0). A failed pipe's error carries them as `flightRecord`.
   */
  flightRecord(): FlightEvent[] {
    return this.recorder?.events() ?? [];
  }

  /** Messages and bytes each way so far, by channel, and errors by code. */
  stats(): PipeStats {
    return this.counters.snapshot();
  }

  /** The channel name used for tensors from `local` here to `remote` there. */
  channelFor(local: Device, remote: Device): string | undefined {
    return this.channelForDevicePair.find((p) => sameDevice(p.local, local) && sameDevice(p.remote, remote))?.channel;
  }

  // ---- writing ----

  /**
   * Sends a message. Resolves when all its bytes have left this process's
   * memory, so its buffers may be reused.
   */
  write(message: Message, options?: OperationOptions): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const started = diagnostics.messageDone.hasSubscribers ? performance.now() : 0;
    let missingTargets: number;
    let deadline: Deadline | undefined;
    try {
      deadline = operationDeadline(options, "pipe write");
      missingTargets = this.encodeDescriptor(message);
    } catch (e) {
      deadline?.release();
      return this.refuse(e);
    }
    this.counters.messagesSent++;
    this.counters.bytesSent += this.encodedBytes;
    if (diagnostics.messageWrite.hasSubscribers) diagnostics.messageWrite.publish(this.sizesOf(message));
    const tensors = message.tensors;
    let tensorsSent: Promise<void> | undefined = DONE;
    if (tensors !== undefined && tensors.length > 0) {
      // Tensors whose target is known go out before the descriptor: when the
      // reader learns of them, their bytes are already at its end.
      if (missingTargets === 0 && this.tensorSends.length === 0) {
        tensorsSent = this.sendTensors(tensors);
      } else {
        const send: PendingTensorSend = { tensors, missingTargets, done: new Deferred() };
        this.tensorSends.push(send);
        this.issueTensorSends();
        if (missingTargets > 0) this.readReplies();
        tensorsSent = send.done.promise;
      }
    }
    if (tensorsSent === undefined) {
      deadline?.release();
      return Promise.reject(this.failure);
    }
    const written = this.writeMain(message.payloads);
    let all: Promise<void>;
    if (tensorsSent === DONE) all = written;
    else if (written === DONE) all = tensorsSent;
    else all = Promise.all([written, tensorsSent]).then(noop);
    const recorder = this.recorder;
    if (recorder) recorder.write(this.encodedBytes, all !== DONE);
    if (started > 0) this.publishDone("write", all, this.encodedBytes, message.tensors?.[0] ? this.sentChannelName(message.tensors[0]) : "", started);
    if (all === DONE) return this.guard(DONE, deadline, "pipe write");
    this.writesInFlight++;
    return this.guard(all.then(this.writeSettled, this.writeFailed), deadline, tensorsSent === DONE ? "pipe write" : WAITING_WRITE);
  }

  /** Encodes the message's descriptor into the pipe's encoder, checking the message; returns its tensors without a target. */
  private encodeDescriptor(message: Message): number {
    checkMessageShape(message);
    const payloads = message.payloads;
    const tensors = message.tensors;
    const w = this.encoder.reset();
    let bytes = 0;
    writeDescriptorHead(w, message.metadata ?? "", payloads?.length ?? 0);
    for (let i = 0; i < (payloads?.length ?? 0); i++) {
      const p = payloads![i]!;
      if (!ArrayBuffer.isView(p?.data)) throw badPayload(i, p);
      writePayloadDescriptor(w, p.data.byteLength, p.metadata ?? "");
      bytes += p.data.byteLength;
    }
    writeTensorCount(w, tensors?.length ?? 0);
    let missingTargets = 0;
    for (let i = 0; i < (tensors?.length ?? 0); i++) {
      const t = tensors![i]!;
      checkTensorBuffer(i, t);
      if (t.targetDevice != null) checkDevice(i, t.targetDevice);
      const sourceDevice = bufferDevice(t.buffer);
      const length = tensorLength(t, i);
      const target = targetOf(t, sourceDevice);
      if (target && !this.channelBetween(sourceDevice, target)) {
        throw new TensorPipeError(
          ErrorCode.NEGOTIATION,
          `no channel was negotiated from ${deviceKey(sourceDevice)} here to ${deviceKey(target)} at the peer (channels: ${describePairs(this.channelForDevicePair)}): register a channel for it on both ends (for CPU tensors, basic works everywhere); pipe.path says why each was passed over`,
        );
      }
      if (!target) {
        if (!this.canSendFrom(sourceDevice)) {
          throw new TensorPipeError(
            ErrorCode.NEGOTIATION,
            `no channel was negotiated for tensors from ${deviceKey(sourceDevice)} here (channels: ${describePairs(this.channelForDevicePair)}): register a channel for it on both ends`,
          );
        }
        missingTargets++;
      }
      writeTensorDescriptor(w, length, sourceDevice, target, t.metadata ?? "");
      bytes += length;
    }
    // Past the peer's limit (this side's, unless set otherwise there) it would end the pipe.
    const encoded = w.finish().length;
    if (encoded > this.options.maxDescriptorLength) {
      throw invalid(
        `message descriptor (metadata and per-entry metadata) is ${encoded} bytes, over the limit of ${this.options.maxDescriptorLength} (ContextOptions.maxControlFrameLength, at both ends): send large data as a payload or a tensor`,
      );
    }
    this.encodedBytes = bytes;
    return missingTargets;
  }

  /** The descriptor and the payloads, on the main connection. */
  private writeMain(payloads: readonly MessagePayload[] | undefined): Promise<void> {
    // Written in place: an array emptied and refilled would get a fresh backing store each time.
    const frames = this.mainFrames;
    let n = 0;
    frames[n++] = this.encoder.finish();
    if (payloads) for (const p of payloads) frames[n++] = p.data;
    if (frames.length !== n) frames.length = n;
    const written = this.main.write(frames);
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
      const channel = this.channelBetween(source, target);
      if (!channel) {
        this.fail(
          new TensorPipeError(
            ErrorCode.NEGOTIATION,
            `peer asked for a tensor on ${deviceKey(target)} but no channel joins ${deviceKey(source)} to it`,
          ),
        );
        return undefined;
      }
      const length = t.length ?? t.buffer.byteLength;
      const counted = this.channelInfo.get(channel)!.stats;
      counted.tensorsSent++;
      counted.bytesSent += length;
      const sent = channel.send(t.buffer, length);
      if (sent !== DONE) (pending ??= []).push(sent);
    }
    if (pending === undefined) return DONE;
    return pending.length === 1 ? pending[0]! : Promise.all(pending).then(noop);
  }

  /** Whether some channel of this pipe takes tensors from `local` here. */
  private canSendFrom(local: Device): boolean {
    if (local === CPU_DEVICE && this.cpuChannel) return true;
    return this.channelForDevicePair.some((p) => sameDevice(p.local, local));
  }

  private channelBetween(local: Device, remote: Device): Channel | undefined {
    if (local === CPU_DEVICE && remote === CPU_DEVICE) return this.cpuChannel;
    return this.channelByPair.get(pairKey(local, remote));
  }

  /** Hands tensors to channels in message order, waiting for replies where needed. */
  private issueTensorSends(): void {
    while (this.tensorSends.length > 0 && !this.failure) {
      const head = this.tensorSends[0]!;
      if (head.missingTargets > 0 && !head.replyDevices) return;
      this.tensorSends.shift();
      const sent = this.sendTensors(head.tensors, head.replyDevices);
      if (sent === undefined) {
        head.done.reject(this.failure);
        return;
      }
      head.done.resolve(sent);
    }
  }

  private readReplies(): void {
    if (this.replyReading || this.failure) return;
    const waiting = this.tensorSends.find((s) => s.missingTargets > 0 && !s.replyDevices);
    if (!waiting) return;
    this.replyReading = true;
    this.reply.read(this.options.maxDescriptorLength).then(
      (bytes) => {
        this.replyReading = false;
        if (this.failure) return;
        try {
          const { targetDevices } = decodeDescriptorReply(bytes);
          if (targetDevices.length !== waiting.missingTargets) {
            throw protocolError(
              `DescriptorReply names ${targetDevices.length} device(s) for ${waiting.missingTargets} tensor(s)`,
            );
          }
          waiting.replyDevices = targetDevices;
        } catch (e) {
          this.fail(e);
          return;
        }
        this.issueTensorSends();
        this.readReplies();
      },
      (e) => {
        this.replyReading = false;
        this.fail(e);
      },
    );
  }

  // ---- reading ----

  /** Resolves with the next message's descriptor; call read() with memory for it next. */
  readDescriptor(options?: OperationOptions): Promise<Descriptor> {
    let deadline: Deadline | undefined;
    try {
      deadline = operationDeadline(options, "readDescriptor");
    } catch (e) {
      return this.failure ? Promise.reject(this.failure) : this.refuse(e);
    }
    const got = this.takeDescriptor(deadline?.signal, "readDescriptor");
    if (!deadline) return got;
    return got.finally(() => deadline.release());
  }

  /** The next descriptor, waited for under `signal` (whose deadline the caller releases). */
  private takeDescriptor(signal: AbortSignal | undefined, what: string): Promise<Descriptor> {
    if (this.failure) return Promise.reject(this.failure);
    if (this.current) {
      return this.refuse(invalid(`${what}() while the descriptor readDescriptor() gave is unread: read() that message first`));
    }
    if (this.ended && !this.prefetched) return Promise.reject(this.ended);
    let got: Promise<Descriptor>;
    let waiter: Deferred<Descriptor> | undefined;
    if (this.prefetched && !this.current && this.descriptorWaiters.length === 0) {
      this.current = this.prefetched;
      this.prefetched = undefined;
      got = Promise.resolve(this.current);
    } else {
      waiter = new Deferred<Descriptor>();
      this.descriptorWaiters.push(waiter);
      got = waiter.promise;
    }
    // A descriptor already in hand is taken: an abort after the call comes too late.
    if (signal === undefined || !waiter) return got;
    // No bytes are consumed by a waiting readDescriptor, so abandoning it leaves the pipe intact.
    return raceSignal(got, signal, what, () => {
      const i = this.descriptorWaiters.indexOf(waiter);
      if (i >= 0) this.descriptorWaiters.splice(i, 1);
      // Handed to this waiter in the same turn as the abort: it goes back for the next call.
      else if (this.current && !this.failure) {
        this.prefetched = this.current;
        this.current = undefined;
      }
    });
  }

  /**
   * Reads the message whose descriptor was returned last into `allocation`:
   * payloads and tensors land right in the memory given.
   */
  read(allocation: Partial<Allocation>, options?: OperationOptions): Promise<void> {
    let deadline: Deadline | undefined;
    try {
      deadline = operationDeadline(options, "pipe read");
    } catch (e) {
      return this.failure ? Promise.reject(this.failure) : this.refuse(e);
    }
    return this.readWith(allocation, deadline, "pipe read");
  }

  /** Reads the current message into `allocation`; releases `deadline` once the read is over. */
  private readWith(allocation: Partial<Allocation>, deadline: Deadline | undefined, what: string): Promise<void> {
    const refused = (e: unknown): Promise<never> => {
      deadline?.release();
      return e === this.failure ? Promise.reject(e) : this.refuse(e);
    };
    if (this.failure) return refused(this.failure);
    const started = diagnostics.messageDone.hasSubscribers ? performance.now() : 0;
    const d = this.current;
    if (!d) {
      deadline?.release();
      return Promise.reject(invalid("read() needs a descriptor: call readDescriptor() first"));
    }
    let targets: Device[] | undefined;
    let payloads: Allocation["payloads"];
    let tensors: Allocation["tensors"];
    try {
      ({ payloads, tensors } = allocationParts(allocation));
      targets = this.checkAllocation(d, payloads, tensors);
    } catch (e) {
      return refused(e);
    }
    this.current = undefined;
    this.counters.messagesReceived++;
    const before = this.counters.bytesReceived;
    if (diagnostics.messageRead.hasSubscribers) diagnostics.messageRead.publish(this.sizesOf(d, tensors));
    // Reads that finished at once (DONE) need nothing more.
    let pending: Promise<void>[] | undefined;
    for (let i = 0; i < d.payloads.length; i++) {
      const data = payloads[i]!.data;
      this.counters.bytesReceived += data.byteLength;
      const got = this.main.readInto(data);
      if (got !== DONE) (pending ??= []).push(got);
    }
    if (targets) (pending ??= []).push(this.reply.write([encodeDescriptorReply({ targetDevices: targets })]));
    for (let i = 0; i < d.tensors.length; i++) {
      const t = d.tensors[i]!;
      const buffer = tensors[i]!.buffer;
      const channel = this.channelBetween(bufferDevice(buffer), t.sourceDevice)!;
      const counted = this.channelInfo.get(channel)!.stats;
      counted.tensorsReceived++;
      counted.bytesReceived += t.length;
      this.counters.bytesReceived += t.length;
      const got = channel.recv(buffer, t.length);
      if (got !== DONE) (pending ??= []).push(got);
    }
    this.recorder?.read(this.counters.bytesReceived - before, pending !== undefined);
    const settled: Promise<unknown> = pending === undefined ? DONE : pending.length === 1 ? pending[0]! : Promise.all(pending);
    if (started > 0) {
      const channel = d.tensors.length > 0 ? this.receivedChannelName(tensors[0]!.buffer, d.tensors[0]!.sourceDevice) : "";
      this.publishDone("read", settled, this.counters.bytesReceived - before, channel, started);
    }
    // Counted before the next descriptor is asked for: that may fail the stream at once.
    if (settled !== DONE) this.readsInFlight++;
    this.fetchDescriptor();
    if (settled === DONE) {
      this.maybeFinishEnded();
      return this.guard(DONE, deadline, what);
    }
    return this.guard(settled.then(this.readSettled, this.readFailed), deadline, what);
  }

  /** Checks the memory given for `d`; returns the devices chosen for tensors the sender left to us. */
  private checkAllocation(d: Descriptor, payloads: Allocation["payloads"], tensors: Allocation["tensors"]): Device[] | undefined {
    if (payloads.length !== d.payloads.length || tensors.length !== d.tensors.length) {
      throw invalid(
        `the allocation has ${payloads.length} payload(s) and ${tensors.length} tensor(s); the message has ${d.payloads.length} and ${d.tensors.length}: give one of each, sized from the descriptor`,
      );
    }
    for (let i = 0; i < d.payloads.length; i++) {
      const p = d.payloads[i]!;
      const data = payloads[i]?.data;
      if (!ArrayBuffer.isView(data)) throw badPayload(i, payloads[i], p.length);
      if (data.byteLength !== p.length) throw invalid(`payload ${i} needs exactly ${p.length} bytes, got ${data.byteLength}`);
    }
    let targets: Device[] | undefined;
    for (let i = 0; i < d.tensors.length; i++) {
      const t = d.tensors[i]!;
      checkTensorBuffer(i, tensors[i], t.length);
      const buffer = tensors[i]!.buffer;
      if (buffer.byteLength < t.length) throw invalid(`tensor ${i} needs ${t.length} bytes, got ${buffer.byteLength}`);
      const device = bufferDevice(buffer);
      if (t.targetDevice && !sameDevice(t.targetDevice, device)) {
        throw invalid(`tensor ${i} was sent to ${deviceKey(t.targetDevice)}; the allocation is on ${deviceKey(device)}`);
      }
      if (!this.channelBetween(device, t.sourceDevice)) {
        throw new TensorPipeError(
          ErrorCode.NEGOTIATION,
          `no channel joins ${deviceKey(t.sourceDevice)} at the peer to ${deviceKey(device)} here (tensor ${i})`,
        );
      }
      if (!t.targetDevice) (targets ??= []).push(device);
    }
    return targets;
  }

  /**
   * A message with a tensor that no channel of this pipe can receive can
   * never be read, and the stream cannot skip it: the pipe fails at once
   * rather than hand out a descriptor no read() can take.
   */
  private checkReceivable(d: Descriptor): void {
    const tensors = d.tensors;
    for (let i = 0; i < tensors.length; i++) {
      const t = tensors[i]!;
      if (t.sourceDevice === CPU_DEVICE && this.cpuChannel && (!t.targetDevice || t.targetDevice === CPU_DEVICE)) continue;
      const ok = t.targetDevice
        ? this.channelBetween(t.targetDevice, t.sourceDevice) !== undefined
        : this.channelForDevicePair.some((p) => sameDevice(p.remote, t.sourceDevice));
      if (!ok) {
        throw new TensorPipeError(
          ErrorCode.NEGOTIATION,
          `peer sent tensor ${i} from ${deviceKey(t.sourceDevice)}${t.targetDevice ? ` to ${deviceKey(t.targetDevice)}` : ""}, which no channel of this pipe can receive (channels: ${describePairs(this.channelForDevicePair)})`,
          { where: `pipe to ${this.peer}` },
        );
      }
    }
  }

  /** Reads the next message into fresh CPU memory. */
  async readMessage(options?: OperationOptions): Promise<ReceivedMessage> {
    let deadline: Deadline | undefined;
    try {
      deadline = operationDeadline(options, "readMessage");
    } catch (e) {
      return this.failure ? Promise.reject(this.failure) : this.refuse(e);
    }
    // One deadline for the whole message, not one for each half.
    let d: Descriptor;
    try {
      d = await this.takeDescriptor(deadline?.signal, "readMessage");
    } catch (e) {
      deadline?.release();
      throw e;
    }
    return this.receive(d, deadline);
  }

  /** Reads the message of descriptor `d` into fresh CPU memory; releases `deadline` once it is over. */
  private async receive(d: Descriptor, deadline: Deadline | undefined): Promise<ReceivedMessage> {
    let allocation: MessageMemory;
    try {
      allocation = allocateMessage(d);
    } catch (e) {
      deadline?.release();
      if (e instanceof TensorPipeError) throw e;
      // Memory for it cannot be had: nor can the stream skip the message.
      const err = new TensorPipeError(
        ErrorCode.SYSTEM,
        `cannot allocate the ${d.payloads.length} payload(s) and ${d.tensors.length} tensor(s) of a message: ${(e as Error).message}; lower ContextOptions.maxMessageBytes to refuse such messages, or read them with readDescriptor() and read()`,
        { where: `pipe to ${this.peer}`, cause: e },
      );
      this.fail(err);
      throw err;
    }
    await this.readWith(allocation, deadline, "readMessage");
    return {
      metadata: d.metadata,
      payloads: d.payloads.map((p, i) => ({ data: allocation.payloads[i]!.data, metadata: p.metadata })),
      tensors: d.tensors.map((t, i) => ({
        buffer: allocation.tensors[i]!.buffer,
        length: t.length,
        sourceDevice: t.sourceDevice,
        metadata: t.metadata,
      })),
    };
  }

  /**
   * Yields messages until the peer closes the pipe between messages, or
   * this side closes it (close(), or its context's): the loop then just
   * ends, without an error. A peer's close in the middle of a message, or
   * with writes of this side unfinished, throws ERR_TP_PEER_CLOSED.
   * Leaving the loop (`break`) leaves the pipe open, for writes and later
   * reads: close() it when done, as a pipe is both ways (a stream's
   * iterator destroys it).
   */
  async *[Symbol.asyncIterator](): AsyncIterator<ReceivedMessage> {
    for (;;) {
      let d: Descriptor;
      try {
        d = await this.readDescriptor();
      } catch (e) {
        if ((e === this.ended && this.endedCleanly) || (e as TensorPipeError).code === ErrorCode.CLOSED) return;
        throw e;
      }
      yield await this.receive(d, undefined);
    }
  }

  private fetchDescriptor(): void {
    if (this.failure) return;
    const max = this.options.maxDescriptorLength;
    if (this.main.readFrame) this.main.readFrame(max, this.onDescriptor);
    else this.main.read(max).then(this.onDescriptorFrame, this.onDescriptorError);
  }

  /**
   * The peer closed its end: readers learn it, in-flight reads may still
   * finish. With writes of this side unfinished the end is not clean, and
   * every operation, reads included, learns that one error.
   */
  private endStream(err: TensorPipeError): void {
    if (this.ended) return;
    this.endedCleanly = this.writesInFlight === 0;
    this.ended = this.endedCleanly ? this.peerClosed(err) : this.unfinishedWrites(err);
    if (!this.prefetched) for (const w of this.descriptorWaiters.splice(0)) w.reject(this.ended);
    this.maybeFinishEnded();
    // The rest of a message being read may still be on its way on a
    // channel's connection, but not for ever: a peer that keeps one open
    // after closing the pipe's own would leave the read pending.
    if (!this.failure && this.readsInFlight > 0) {
      const ended = this.ended;
      this.endedReads = setTimeout(
        () =>
          this.fail(
            new TensorPipeError(ErrorCode.CONNECTION_RESET, `truncated message: the peer closed the pipe and the rest of the message did not come within ${ENDED_READ_GRACE_MS / 1000} s`, {
              where: `pipe to ${this.peer}`,
              cause: ended,
            }),
          ),
        ENDED_READ_GRACE_MS,
      );
    }
  }

  /**
   * One of the pipe's connections other than main ended (`cause`). A peer
   * that closed its pipe ended main too, but main's end comes behind the
   * messages it still holds, which a slow reader here may take long to
   * read. So the pipe fails, idle or not, only once main has been waiting
   * for the next descriptor, with nothing come, for two checks in a row:
   * the peer cut that connection alone, or it failed on its own, and
   * nothing would otherwise notice until its next use.
   */
  private connectionCut(what: string, cause: Error): void {
    let waitedSince = -1;
    const check = (): void => {
      if (this.failure || this.ended) return;
      const waiting = !this.prefetched && !this.current && this.readsInFlight === 0;
      if (waiting && waitedSince === this.counters.messagesReceived) {
        const err = this.describe(cause);
        this.fail(
          err.code === ErrorCode.PEER_CLOSED
            ? new TensorPipeError(ErrorCode.CONNECTION_RESET, `the peer closed the pipe's ${what} connection while the pipe stayed open`, { where: `pipe to ${this.peer}`, cause: err })
            : err,
        );
        return;
      }
      waitedSince = waiting ? this.counters.messagesReceived : -1;
      setTimeout(check, CUT_CONNECTION_CHECK_MS).unref();
    };
    check();
  }

  /** Once what the peer sent before leaving has been read, the pipe is over. */
  private maybeFinishEnded(): void {
    if (!this.ended || this.readsInFlight > 0 || this.prefetched || this.current) return;
    // Writes begun after a clean end are lost too: fail() says so.
    this.fail(this.ended, this.endedCleanly && this.writesInFlight === 0 ? "ended" : "error");
  }

  /** The peer's clean end, as every later operation hears of it (a write as much as a read: not the read that learnt it). */
  private peerClosed(cause: TensorPipeError): TensorPipeError {
    return new TensorPipeError(ErrorCode.PEER_CLOSED, `the peer closed the pipe (${cause.message})`, {
      where: `pipe to ${this.peer}`,
      errno: cause.errno,
      syscall: cause.syscall,
      cause,
    });
  }

  /** The peer's end (`cause`) while writes of this side were unfinished: what they carried is lost. */
  private unfinishedWrites(cause: TensorPipeError): TensorPipeError {
    const err = new TensorPipeError(ErrorCode.PEER_CLOSED, `peer closed the pipe with ${this.writesInFlight} write(s) of this side unfinished`, {
      where: `pipe to ${this.peer}`,
      errno: cause.errno,
      syscall: cause.syscall,
      cause,
    });
    UNFINISHED.add(err);
    return err;
  }

  /** The name of the channel that sends `t`; "" while the peer has yet to pick its target. */
  private sentChannelName(t: MessageTensor): string {
    const source = bufferDevice(t.buffer);
    const target = targetOf(t, source);
    return this.channelName(target && this.channelBetween(source, target));
  }

  /** The name of the channel that receives into `buffer` a tensor from `source` at the peer. */
  private receivedChannelName(buffer: TensorBuffer, source: Device): string {
    return this.channelName(this.channelBetween(bufferDevice(buffer), source));
  }

  private channelName(channel: Channel | undefined): string {
    return (channel && this.channelInfo.get(channel)?.name) ?? "";
  }

  /** Publishes on `tensorpipe:message:done` once `settled` has, if it succeeds. */
  private publishDone(direction: "write" | "read", settled: Promise<unknown>, bytes: number, channel: string, started: number): void {
    const publish = () =>
      diagnostics.messageDone.publish({ pipe: this, direction, bytes, channel, seconds: (performance.now() - started) / 1000 } satisfies MessageDoneMessage);
    if (settled === DONE) publish();
    else settled.then(publish, noop);
  }

  /** What diagnostics_channel subscribers learn of a message: its sizes, and the channel of each tensor. */
  private sizesOf(m: Message | Descriptor, allocated?: Allocation["tensors"]): MessageSizesMessage {
    const tensors: MessageSizesMessage["tensors"] = [];
    const all = m.tensors ?? [];
    for (let i = 0; i < all.length; i++) {
      const t = all[i]!;
      if ("buffer" in t) tensors.push({ length: t.length ?? t.buffer.byteLength, channel: this.sentChannelName(t) });
      else tensors.push({ length: t.length, channel: this.receivedChannelName(allocated![i]!.buffer, t.sourceDevice) });
    }
    return {
      pipe: this,
      metadataLength: m.metadata?.length ?? 0,
      payloads: (m.payloads ?? []).map((p) => ("data" in p ? p.data.byteLength : p.length)),
      tensors,
    };
  }

  // ---- failure ----

  /** An operation refused for its own reason: counted, the pipe goes on. */
  private refuse(e: unknown): Promise<never> {
    this.counters.countError((e as TensorPipeError).code ?? ErrorCode.SYSTEM);
    if (this.recorder && e instanceof TensorPipeError) this.recorder.note("error", `refused: ${describeError(e)}`);
    return Promise.reject(e);
  }

  private describe(e: unknown): TensorPipeError {
    if (e instanceof TensorPipeError) return e;
    return fromNativeError(e, `pipe to ${this.peer}`);
  }

  private onOperationError(e: unknown): never {
    const err = this.describe(e);
    this.fail(err);
    throw this.failure ?? err;
  }

  /** Cancelling an operation under way breaks the stream, so it fails the pipe. */
  private guard<T>(p: Promise<T>, deadline: Deadline | undefined, what: string): Promise<T> {
    if (deadline === undefined) return p;
    // Done already: an abort after the call comes too late to undo it.
    if (p === DONE) {
      deadline.release();
      return p;
    }
    return deadline.race(p, what, (err) => this.fail(err));
  }

  /** Ends the pipe: for an error, or closed here, or ended by the peer between messages (neither counts as an error). */
  private fail(e: unknown, how: "error" | "closed here" | "ended" = "error"): void {
    if (this.failure) return;
    clearTimeout(this.endedReads);
    let err = this.describe(e);
    // However it was learnt (main's end, a channel's connection, a write), a
    // peer gone with writes of this side unfinished is one error, said once.
    if (how === "error" && err.code === ErrorCode.PEER_CLOSED && this.writesInFlight > 0 && !UNFINISHED.has(err)) err = this.unfinishedWrites(err);
    this.failure = err;
    if (how === "error") this.counters.countError(err.code);
    const recorder = this.recorder;
    if (recorder) {
      if (how === "error") recorder.note("error", describeError(err));
      else recorder.note("closed", how === "ended" ? `ended by the peer between messages (${describeError(err)})` : how);
      // An earlier end may have given it its own.
      err.flightRecord ??= recorder.events();
    }
    for (const w of this.descriptorWaiters.splice(0)) w.reject(err);
    for (const s of this.tensorSends.splice(0)) s.done.reject(err);
    this.main.close(err);
    this.reply.close(err);
    for (const c of this.channels.values()) c.close(err);
    this.closedDeferred.resolve(err);
    if (log.enabled) log("pipe to %s closed: %s", this.peer, how === "closed here" ? how : describeError(err));
    if (diagnostics.pipeClose.hasSubscribers) diagnostics.pipeClose.publish({ pipe: this, error: err });
  }

  /** Whether the pipe has ended: closed here, ended by the peer, or failed (`closed` says which). */
  get isClosed(): boolean {
    return this.failure !== undefined;
  }

  /** Closes the pipe; pending operations reject with ERR_TP_CLOSED. */
  close(): void {
    this.fail(closedError("pipe"), "closed here");
  }

  /** close(), for `await using`: resolves once the pipe has ended. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
    await this.closed;
  }
}
