/**
 * One end of a pipe: an ordered stream of messages in each direction over a
 * main connection (descriptors and payloads), a reply connection
 * (DescriptorReply) and one channel per chosen device pair (tensors).
 */
import { type OperationOptions, operationSignal, raceSignal } from "./abort.js";
import type { Channel } from "./channel.js";
import { Deferred } from "./deferred.js";
import type { Device, TensorBuffer } from "./device.js";
import { bufferDevice, CPU_DEVICE, deviceKey } from "./device.js";
import { ErrorCode, TensorPipeError, closedError, fromNativeError, protocolError } from "./errors.js";
import type { Allocation, Descriptor, Message, ReceivedMessage } from "./message.js";
import { pairKey } from "./negotiation.js";
import type { DevicePairChoice } from "./protocol.js";
import { decodeDescriptor, decodeDescriptorReply, encodeDescriptor, encodeDescriptorReply } from "./protocol.js";
import type { Connection } from "./transport.js";

export interface PipeOptions {
  /** Largest descriptor frame accepted from the peer. */
  maxDescriptorLength: number;
}

export interface PipeParts {
  transport: string;
  main: Connection;
  reply: Connection;
  channels: Map<string, Channel>;
  /** Channel per (local device, remote device), from this side's view. */
  pairs: DevicePairChoice[];
  /** The peer, for error messages: a URL or an address. */
  peer: string;
  options: PipeOptions;
}

interface PendingTensorSend {
  tensors: { buffer: TensorBuffer; length: number; targetDevice?: Device }[];
  missingTargets: number;
  replyDevices?: Device[];
  done: Deferred<void>;
}

function invalid(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.INVALID_ARG, message);
}

export class Pipe implements AsyncIterable<ReceivedMessage> {
  readonly transport: string;
  readonly channelForDevicePair: readonly DevicePairChoice[];
  readonly peer: string;
  /** Settles (never rejects) with the error that ended the pipe. */
  readonly closed: Promise<TensorPipeError>;

  private readonly main: Connection;
  private readonly reply: Connection;
  private readonly channels: Map<string, Channel>;
  private readonly channelByPair = new Map<string, Channel>();
  private readonly options: PipeOptions;
  private failure?: TensorPipeError;
  private readonly closedDeferred = new Deferred<TensorPipeError>();

  private readonly tensorSends: PendingTensorSend[] = [];
  private replyReading = false;

  private readonly descriptorWaiters: Deferred<Descriptor>[] = [];
  private prefetched?: Descriptor;
  /** Handed to the reader, waiting for read(allocation). */
  private current?: Descriptor;
  /** Set when the peer ended the stream cleanly between messages. */
  private ended?: TensorPipeError;
  private readonly inFlightReads = new Set<Promise<unknown>>();

  constructor(parts: PipeParts) {
    this.transport = parts.transport;
    this.main = parts.main;
    this.reply = parts.reply;
    this.channels = parts.channels;
    this.channelForDevicePair = parts.pairs;
    this.peer = parts.peer;
    this.options = parts.options;
    this.closed = this.closedDeferred.promise;
    for (const p of parts.pairs) {
      const channel = this.channels.get(p.channel);
      if (channel) this.channelByPair.set(pairKey(p.local, p.remote), channel);
    }
    this.fetchDescriptor();
    // A connection that fails while idle: the peer is gone even if nobody
    // is reading or writing right now.
    this.main.closed.then((e) => e && !this.failure && this.endStream(this.describe(e)));
    this.reply.closed.then((e) => e && !this.failure && this.tensorSends.length > 0 && this.fail(e));
  }

  /** The channel name used for tensors from `local` here to `remote` there. */
  channelFor(local: Device, remote: Device): string | undefined {
    return this.channelForDevicePair.find(
      (p) => deviceKey(p.local) === deviceKey(local) && deviceKey(p.remote) === deviceKey(remote),
    )?.channel;
  }

  // ---- writing ----

  /**
   * Sends a message. Resolves when all its bytes have left this process's
   * memory, so its buffers may be reused.
   */
  write(message: Message, options?: OperationOptions): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    let descriptor: Descriptor;
    let send: PendingTensorSend;
    try {
      ({ descriptor, send } = this.prepareWrite(message));
    } catch (e) {
      return Promise.reject(e);
    }
    const frames: ArrayBufferView[] = [encodeDescriptor(descriptor)];
    for (const p of message.payloads ?? []) frames.push(p.data);
    let all: Promise<void>;
    if (send.tensors.length > 0) {
      // Tensors whose target is known go out before the descriptor: when the
      // reader learns of them, their bytes are already at its end.
      this.tensorSends.push(send);
      this.issueTensorSends();
      all = Promise.all([this.main.write(frames), send.done.promise]).then(() => undefined);
      if (send.missingTargets > 0) this.readReplies();
    } else {
      all = this.main.write(frames);
    }
    return this.guard(
      all.catch((e) => this.onOperationError(e)),
      options,
      "pipe write",
    );
  }

  private prepareWrite(message: Message): { descriptor: Descriptor; send: PendingTensorSend } {
    const descriptor: Descriptor = { metadata: message.metadata ?? "", payloads: [], tensors: [] };
    for (const p of message.payloads ?? []) {
      if (!ArrayBuffer.isView(p?.data)) throw invalid("each payload needs data: an ArrayBufferView");
      descriptor.payloads.push({ length: p.data.byteLength, metadata: p.metadata ?? "" });
    }
    const send: PendingTensorSend = { tensors: [], missingTargets: 0, done: new Deferred() };
    for (const t of message.tensors ?? []) {
      if (!t?.buffer) throw invalid("each tensor needs a buffer");
      const sourceDevice = bufferDevice(t.buffer);
      const length = t.length ?? t.buffer.byteLength;
      if (!Number.isSafeInteger(length) || length < 0 || length > t.buffer.byteLength) {
        throw invalid(`tensor length ${length} does not fit its ${t.buffer.byteLength}-byte buffer`);
      }
      if (t.targetDevice) {
        if (!this.channelByPair.has(pairKey(sourceDevice, t.targetDevice))) {
          throw new TensorPipeError(
            ErrorCode.NEGOTIATION,
            `no channel was negotiated from ${deviceKey(sourceDevice)} here to ${deviceKey(t.targetDevice)} at the peer`,
          );
        }
        descriptor.tensors.push({ length, sourceDevice, targetDevice: t.targetDevice, metadata: t.metadata ?? "" });
      } else {
        send.missingTargets++;
        descriptor.tensors.push({ length, sourceDevice, metadata: t.metadata ?? "" });
      }
      send.tensors.push({ buffer: t.buffer, length, targetDevice: t.targetDevice });
    }
    return { descriptor, send };
  }

  /** Hands tensors to channels in message order, waiting for replies where needed. */
  private issueTensorSends(): void {
    while (this.tensorSends.length > 0 && !this.failure) {
      const head = this.tensorSends[0]!;
      if (head.missingTargets > 0 && !head.replyDevices) return;
      this.tensorSends.shift();
      let r = 0;
      const sends: Promise<void>[] = [];
      for (const t of head.tensors) {
        const target = t.targetDevice ?? head.replyDevices![r++]!;
        const source = bufferDevice(t.buffer);
        const channel = this.channelByPair.get(pairKey(source, target));
        if (!channel) {
          this.fail(
            new TensorPipeError(
              ErrorCode.NEGOTIATION,
              `peer asked for a tensor on ${deviceKey(target)} but no channel joins ${deviceKey(source)} to it`,
            ),
          );
          return;
        }
        sends.push(channel.send(t.buffer, t.length));
      }
      head.done.resolve(Promise.all(sends).then(() => undefined));
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
    if (this.failure) return Promise.reject(this.failure);
    if (this.ended && !this.prefetched) return Promise.reject(this.ended);
    const waiter = new Deferred<Descriptor>();
    if (this.prefetched && !this.current && this.descriptorWaiters.length === 0) {
      this.current = this.prefetched;
      this.prefetched = undefined;
      waiter.resolve(this.current);
    } else {
      this.descriptorWaiters.push(waiter);
    }
    const signal = operationSignal(options);
    // No bytes are consumed by a waiting readDescriptor, so abandoning it leaves the pipe intact.
    return raceSignal(waiter.promise, signal, "readDescriptor", () => {
      const i = this.descriptorWaiters.indexOf(waiter);
      if (i >= 0) this.descriptorWaiters.splice(i, 1);
    });
  }

  /**
   * Reads the message whose descriptor was returned last into `allocation`:
   * payloads and tensors land right in the memory given.
   */
  read(allocation: Allocation, options?: OperationOptions): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const d = this.current;
    if (!d) return Promise.reject(invalid("read() needs a descriptor: call readDescriptor() first"));
    const targets: Device[] = [];
    try {
      this.checkAllocation(d, allocation, targets);
    } catch (e) {
      return Promise.reject(e);
    }
    this.current = undefined;
    const reads: Promise<void>[] = d.payloads.map((_, i) => this.main.readInto(allocation.payloads[i]!.data));
    if (targets.length > 0) reads.push(this.reply.write([encodeDescriptorReply({ targetDevices: targets })]));
    d.tensors.forEach((t, i) => {
      const buffer = allocation.tensors[i]!.buffer;
      const channel = this.channelByPair.get(pairKey(bufferDevice(buffer), t.sourceDevice))!;
      reads.push(channel.recv(buffer, t.length));
    });
    this.fetchDescriptor();
    const all = (reads.length === 1 ? reads[0]! : Promise.all(reads).then(() => undefined)).catch((e) =>
      this.onOperationError(e),
    );
    this.inFlightReads.add(all);
    const settled = () => {
      this.inFlightReads.delete(all);
      this.maybeFinishEnded();
    };
    all.then(settled, settled);
    return this.guard(all, options, "pipe read");
  }

  private checkAllocation(d: Descriptor, a: Allocation, targets: Device[]): void {
    if (a?.payloads?.length !== d.payloads.length || a?.tensors?.length !== d.tensors.length) {
      throw invalid(
        `allocation has ${a?.payloads?.length} payload(s) and ${a?.tensors?.length} tensor(s); the message has ${d.payloads.length} and ${d.tensors.length}`,
      );
    }
    d.payloads.forEach((p, i) => {
      const data = a.payloads[i]!.data;
      if (!ArrayBuffer.isView(data) || data.byteLength !== p.length) {
        throw invalid(`payload ${i} needs exactly ${p.length} bytes, got ${data?.byteLength}`);
      }
    });
    d.tensors.forEach((t, i) => {
      const buffer = a.tensors[i]!.buffer;
      if (!buffer || buffer.byteLength < t.length) {
        throw invalid(`tensor ${i} needs ${t.length} bytes, got ${buffer?.byteLength}`);
      }
      const device = bufferDevice(buffer);
      if (t.targetDevice && deviceKey(t.targetDevice) !== deviceKey(device)) {
        throw invalid(`tensor ${i} was sent to ${deviceKey(t.targetDevice)}; the allocation is on ${deviceKey(device)}`);
      }
      if (!this.channelByPair.has(pairKey(device, t.sourceDevice))) {
        throw new TensorPipeError(
          ErrorCode.NEGOTIATION,
          `no channel joins ${deviceKey(t.sourceDevice)} at the peer to ${deviceKey(device)} here (tensor ${i})`,
        );
      }
      if (!t.targetDevice) targets.push(device);
    });
  }

  /** Reads the next message into fresh CPU memory. */
  async readMessage(options?: OperationOptions): Promise<ReceivedMessage> {
    const d = await this.readDescriptor(options);
    const allocation: Allocation = {
      payloads: d.payloads.map((p) => ({ data: new Uint8Array(p.length) })),
      tensors: d.tensors.map((t, i) => {
        const target = t.targetDevice ?? CPU_DEVICE;
        if (target.type !== "cpu") {
          throw invalid(`tensor ${i} targets ${deviceKey(target)}: use readDescriptor() and read() with device memory`);
        }
        return { buffer: new Uint8Array(t.length) };
      }),
    };
    await this.read(allocation, options);
    return {
      metadata: d.metadata,
      payloads: d.payloads.map((p, i) => ({ data: allocation.payloads[i]!.data as Uint8Array, metadata: p.metadata })),
      tensors: d.tensors.map((t, i) => ({
        buffer: allocation.tensors[i]!.buffer,
        length: t.length,
        sourceDevice: t.sourceDevice,
        metadata: t.metadata,
      })),
    };
  }

  /** Yields messages until the peer closes the pipe between messages. */
  async *[Symbol.asyncIterator](): AsyncIterator<ReceivedMessage> {
    for (;;) {
      try {
        yield await this.readMessage();
      } catch (e) {
        if (e === this.ended || (e as TensorPipeError).code === ErrorCode.CLOSED) return;
        throw e;
      }
    }
  }

  private fetchDescriptor(): void {
    if (this.failure) return;
    this.main.read(this.options.maxDescriptorLength).then(
      (bytes) => {
        if (this.failure) return;
        let d: Descriptor;
        try {
          d = decodeDescriptor(bytes);
        } catch (e) {
          this.fail(e);
          return;
        }
        const waiter = this.descriptorWaiters.shift();
        if (waiter) {
          this.current = d;
          waiter.resolve(d);
        } else {
          this.prefetched = d;
        }
      },
      (e) => {
        const err = this.describe(e);
        if (err.code === ErrorCode.PEER_CLOSED) this.endStream(err);
        else this.fail(err);
      },
    );
  }

  /** The peer closed between messages: readers learn it, in-flight reads may still finish. */
  private endStream(err: TensorPipeError): void {
    if (this.ended) return;
    this.ended = err;
    if (!this.prefetched) for (const w of this.descriptorWaiters.splice(0)) w.reject(err);
    this.maybeFinishEnded();
  }

  /** Once what the peer sent before leaving has been read, the pipe is over. */
  private maybeFinishEnded(): void {
    if (this.ended && this.inFlightReads.size === 0 && !this.prefetched && !this.current) this.fail(this.ended);
  }

  // ---- failure ----

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
  private guard<T>(p: Promise<T>, options: OperationOptions | undefined, what: string): Promise<T> {
    const signal = operationSignal(options);
    return raceSignal(p, signal, what, (err) => this.fail(err));
  }

  private fail(e: unknown): void {
    if (this.failure) return;
    const err = this.describe(e);
    this.failure = err;
    for (const w of this.descriptorWaiters.splice(0)) w.reject(err);
    for (const s of this.tensorSends.splice(0)) s.done.reject(err);
    this.main.close(err);
    this.reply.close(err);
    for (const c of this.channels.values()) c.close(err);
    this.closedDeferred.resolve(err);
  }

  /** Closes the pipe; pending operations reject with ERR_TP_CLOSED. */
  close(): void {
    this.fail(closedError("pipe"));
  }
}

