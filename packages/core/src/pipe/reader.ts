/**
 * The inbound half of a pipe: descriptors read one ahead on the main
 * connection, offered to readDescriptor() callers in order (ReadOperation),
 * and each message's payloads and tensors landed in the memory read() is
 * given, the payloads from the main connection and the tensors from their
 * channels.
 */
import { raceSignal } from "../abort.js";
import { type Device, type TensorBuffer, CPU_DEVICE, bufferDevice, deviceKey, sameDevice } from "../device.js";
import { ErrorCode, TensorPipeError } from "../errors.js";
import type { Allocation, Descriptor } from "../message.js";
import { allocationParts, badPayload, checkTensorBuffer } from "../message-check.js";
import type { IncomingMemory } from "../message-memory.js";
import { decodeDescriptor, encodeDescriptorReply } from "../protocol/message.js";
import { type Connection, DONE } from "../transport.js";
import type { PipeObserver } from "./observer.js";
import { Fifo } from "../fifo.js";
import { Landings, type PartMemory } from "./landing.js";
import { ReadOperation, type ReadOwner } from "./read-operation.js";
import type { ChannelRoutes } from "./routes.js";

const noop = (): void => undefined;

function invalid(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.INVALID_ARG, message);
}

/** Whether a transport refused a frame for its length (it marks the native error so, not only in words). */
function overLimit(err: TensorPipeError): boolean {
  return err.code === ErrorCode.PROTOCOL && (err.cause as { overLimit?: unknown } | undefined)?.overLimit === true;
}

/** What the reader needs of its pipe. */
export interface ReaderHost {
  readonly main: Connection;
  readonly reply: Connection;
  readonly routes: ChannelRoutes;
  readonly observer: PipeObserver;
  readonly peer: string;
  readonly maxDescriptorLength: number;
  readonly limits: Parameters<typeof decodeDescriptor>[1];
  /** The pipe's error once it has one. */
  readonly failure: TensorPipeError | undefined;
  /** Rejects with the pipe's final error, once it has one. */
  ended(): Promise<never>;
  /** Whether the pipe has its final error (failure may be a peer's end held before it). */
  readonly over: boolean;
  /** Fails the pipe with `e` (the first error wins). */
  fail(e: unknown): void;
  /** The main connection ended with `err` between messages: the peer's end. */
  mainEnded(err: TensorPipeError): void;
  /** A read in flight settled, or a descriptor was taken: the peer's end may be decided. */
  readProgressed(): void;
  /** `e` as a TensorPipeError of this pipe. */
  describe(e: unknown): TensorPipeError;
}

/** Done operations kept for the next messages: the pipe makes no garbage for them in the steady state. */
const POOLED = 8;

/** One pipe's inbound half. */
export class Reader implements ReadOwner {
  /** Reads given memory whose bytes are still landing. */
  inFlight = 0;
  /** A descriptor that came before anyone asked for it. */
  private arrived?: Descriptor;
  /** The read whose descriptor was offered, waiting for read(). */
  private offered?: ReadOperation;
  /** Callers waiting for a descriptor, in order. */
  private readonly waiting = new Fifo<ReadOperation>();
  /** Operations done, for the next messages (a stack that never shrinks). */
  private readonly pool: (ReadOperation | undefined)[] = new Array<ReadOperation | undefined>(POOLED);
  private pooled = 0;
  private readonly landings: Landings;
  /** The allocation of a read whose parts are all asked for at once, reused read after read. */
  private readonly given = new GivenMemory();
  private readonly fetchNext = (): void => this.fetch();
  /** The last read taken that had not settled at once: the next one settles after it. */
  private lastLanding?: Promise<void>;
  /** Once the peer's end is decided: the error a caller of readDescriptor() gets past what came before it. */
  private end?: TensorPipeError;
  private readonly onFrame = (err: Error | null, bytes?: Uint8Array): void => {
    if (err) this.frameFailed(err);
    else this.descriptorCame(bytes!);
  };

  constructor(private readonly host: ReaderHost) {
    this.landings = new Landings(host);
  }

  /** Whether a message is here that nobody has read yet (offered, or come first). */
  get holdsMessage(): boolean {
    return this.arrived !== undefined || this.offered !== undefined;
  }

  /** Reads the next descriptor, ahead of any caller. */
  fetch(): void {
    const { main, maxDescriptorLength } = this.host;
    if (this.host.failure) return;
    if (main.readFrame) main.readFrame(maxDescriptorLength, this.onFrame);
    else main.read(maxDescriptorLength).then(this.descriptorCame, this.frameFailed);
  }

  private readonly descriptorCame = (bytes: Uint8Array): void => {
    if (this.host.failure) return;
    let d: Descriptor;
    try {
      d = decodeDescriptor(bytes, this.host.limits);
    } catch (e) {
      this.host.fail(e);
      return;
    }
    // A message no channel of this pipe can receive can never be read, and
    // the stream cannot skip it: the pipe fails rather than offer it.
    const i = this.host.routes.unreceivable(d);
    if (i !== undefined) {
      const t = d.tensors[i]!;
      this.host.fail(
        new TensorPipeError(
          ErrorCode.NEGOTIATION,
          `peer sent tensor ${i} from ${deviceKey(t.sourceDevice)}${t.targetDevice ? ` to ${deviceKey(t.targetDevice)}` : ""}, which no channel of this pipe can receive (channels: ${this.host.routes.describe()})`,
          { where: `pipe to ${this.host.peer}` },
        ),
      );
      return;
    }
    this.host.observer.descriptor(bytes.byteLength);
    this.arrived = d;
    this.advance();
  };

  private readonly frameFailed = (e: unknown): void => {
    const err = this.host.describe(e);
    if (err.code === ErrorCode.PEER_CLOSED) this.host.mainEnded(err);
    else if (overLimit(err)) {
      // The transport knows the number; this side's option that sets it is named here.
      this.host.fail(
        new TensorPipeError(ErrorCode.PROTOCOL, `descriptor ${err.message}: raise ContextOptions.maxControlFrameLength on this side if that is meant`, {
          cause: err,
        }),
      );
    } else this.host.fail(err);
  };

  /**
   * Offers a descriptor that came to the first caller waiting, or rejects
   * the callers waiting once the peer's end is decided and nothing came
   * before it. The one place a ReadOperation leaves "descriptor awaited".
   */
  private advance(): void {
    if (!this.offered && this.arrived) {
      const op = this.waiting.shift();
      if (!op) return;
      op.offer(this.arrived);
      this.arrived = undefined;
      this.offered = op;
      return;
    }
    if (this.end && !this.arrived) for (const op of this.waiting.drain()) op.fail(this.end);
  }

  /**
   * The next descriptor, for readDescriptor() or readMessage() (with none
   * offered and unread), waited for under `signal`. An abort leaves the
   * pipe as it was: nothing was consumed.
   */
  take(signal: AbortSignal | undefined, what: string, byMessage: boolean): Promise<Descriptor> {
    const failure = this.host.failure;
    if (failure) return Promise.reject(failure);
    if (this.end && !this.arrived) return Promise.reject(this.end);
    const op = this.pooled > 0 ? this.pool[--this.pooled]! : new ReadOperation(this);
    op.byMessage = byMessage;
    if (this.arrived && this.waiting.length === 0) {
      op.offer(this.arrived);
      this.arrived = undefined;
      this.offered = op;
      // A descriptor in hand is taken: an abort after the call comes too late.
      return op.offered;
    }
    this.waiting.push(op);
    return signal ? this.waitUnder(op, signal, what) : op.offered;
  }

  /** `op`'s descriptor under `signal`: an abort takes the operation back, or its descriptor, offered in the same turn, for the next caller. */
  private waitUnder(op: ReadOperation, signal: AbortSignal, what: string): Promise<Descriptor> {
    return raceSignal(op.offered, signal, what, (err) => {
      if (!this.host.failure) this.host.observer.refused(err);
      if (this.waiting.remove(op)) return;
      if (this.offered === op && !this.host.failure) {
        this.offered = undefined;
        this.arrived = op.takeBack();
        this.advance();
      }
    });
  }

  landed(op: ReadOperation): void {
    op.landed();
    this.host.observer.received();
    this.inFlight--;
    this.recycle(op);
    this.host.readProgressed();
  }

  landingFailed(op: ReadOperation, e: unknown): Promise<never> {
    op.fail(e);
    this.inFlight--;
    try {
      const err = this.host.describe(e);
      // The peer left with part of the message unsent: a truncated message,
      // as a frame cut short is, whichever transport's frames it fell between.
      if (err.code !== ErrorCode.PEER_CLOSED || this.host.failure) this.host.fail(err);
      else {
        this.host.fail(
          new TensorPipeError(ErrorCode.CONNECTION_RESET, "truncated message: the peer closed the pipe in the middle of a message, the rest of it never came", {
            where: `pipe to ${this.host.peer}`,
            errnoName: err.errnoName,
            syscall: err.syscall,
            cause: err,
          }),
        );
      }
      if (this.host.over) throw this.host.failure;
    } finally {
      this.host.readProgressed();
    }
    // Held: a peer of this library may still say why it went.
    return this.host.ended();
  }

  private recycle(op: ReadOperation): void {
    if (this.pooled === POOLED) return;
    op.recycle();
    this.pool[this.pooled++] = op;
  }

  /** Whether a message is offered: readMessage()'s, or one readDescriptor() gave. */
  get canRead(): boolean {
    return this.offered !== undefined;
  }

  /** Whether readDescriptor() gave a message that is not read yet: read() reads it, and no other caller may take the next. */
  get callerHolds(): boolean {
    return this.offered !== undefined && !this.offered.byMessage;
  }

  /**
   * Lands the offered message in `allocation` (after checking it all):
   * payloads from the main connection, tensors from their channels, a
   * DescriptorReply first for tensors the sender left to this side.
   * Throws where the allocation will not do (the message stays offered).
   * DONE when every byte was here.
   */
  read(allocation: Partial<Allocation>, started: number): Promise<void> {
    const d = this.offered!.descriptor!;
    const { payloads, tensors } = allocationParts(allocation);
    const { targets, bytes } = this.checkAllocation(d, payloads, tensors);
    // Kept by a message asked for in a window, so not the one reused message after message.
    if (!this.landings.atOnce(d, bytes)) return this.land(d, new GivenMemory().of(payloads, tensors), targets, bytes, started);
    const landed = this.land(d, this.given.of(payloads, tensors), targets, bytes, started);
    // Every part was asked for: the caller's memory is not this pipe's to keep.
    this.given.of(NONE, NONE);
    return landed;
  }

  /** Lands the offered message in memory made for it as its parts are asked for (readMessage()). */
  readIncoming(memory: IncomingMemory, started: number): Promise<void> {
    const d = memory.descriptor;
    let targets: Device[] | undefined;
    let bytes = 0;
    for (const p of d.payloads) bytes += p.length;
    for (let i = 0; i < d.tensors.length; i++) {
      const t = d.tensors[i]!;
      if (!this.host.routes.between(CPU_DEVICE, t.sourceDevice)) throw noChannel(t.sourceDevice, CPU_DEVICE, i);
      if (!t.targetDevice) (targets ??= []).push(CPU_DEVICE);
      bytes += t.length;
    }
    return this.land(d, memory, targets, bytes, started);
  }

  private land(d: Descriptor, memory: PartMemory, targets: Device[] | undefined, bytes: number, started: number): Promise<void> {
    const op = this.offered!;
    this.offered = undefined;
    op.reading();
    // Counted before the next descriptor is asked for (land() asks once it
    // has asked for every part): the end of the stream may come at once.
    // Reads settle in the order they were taken: one whose parts came first
    // (no bytes, or no reply to write) waits for those before it.
    const before = this.inFlight > 0 ? this.lastLanding : undefined;
    this.inFlight++;
    const replied = targets ? this.host.reply.write([encodeDescriptorReply({ targetDevices: targets })]) : DONE;
    const landed = this.landings.land(d, memory, bytes, this.fetchNext);
    const settled = replied === DONE ? landed : landed === DONE ? replied : Promise.all([replied, landed]).then(noop);
    this.host.observer.reading(d, memory, bytes, settled, started);
    if (settled === DONE && before === undefined) {
      this.inFlight--;
      op.landed();
      this.recycle(op);
      this.host.readProgressed();
      return DONE;
    }
    const inOrder = before === undefined ? settled : settled === DONE ? before : Promise.all([before, settled]).then(noop);
    this.lastLanding = inOrder.then(op.onLanded, op.onFailed);
    return this.lastLanding;
  }

  /** The peer's end is decided: callers past what came before it hear `err`. */
  ended(err: TensorPipeError): void {
    this.end = err;
    this.advance();
  }

  /** The pipe failed: every caller waiting hears `err`. */
  fail(err: TensorPipeError): void {
    for (const op of this.waiting.drain()) op.fail(err);
    this.offered?.fail(err);
  }

  /** Checks the memory given for `d`: the devices chosen for tensors the sender left to this side, and the bytes it takes. */
  private checkAllocation(d: Descriptor, payloads: Allocation["payloads"], tensors: Allocation["tensors"]): { targets: Device[] | undefined; bytes: number } {
    if (payloads.length !== d.payloads.length || tensors.length !== d.tensors.length) {
      throw invalid(
        `the allocation has ${payloads.length} payload(s) and ${tensors.length} tensor(s); the message has ${d.payloads.length} and ${d.tensors.length}: give one of each, sized from the descriptor`,
      );
    }
    let bytes = 0;
    for (let i = 0; i < d.payloads.length; i++) {
      const p = d.payloads[i]!;
      const data = payloads[i]?.data;
      if (!ArrayBuffer.isView(data)) throw badPayload(i, payloads[i], p.length);
      if (data.byteLength !== p.length) throw invalid(`payload ${i} needs exactly ${p.length} bytes, got ${data.byteLength}`);
      bytes += p.length;
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
      if (!this.host.routes.between(device, t.sourceDevice)) throw noChannel(t.sourceDevice, device, i);
      if (!t.targetDevice) (targets ??= []).push(device);
      bytes += t.length;
    }
    return { targets, bytes };
  }
}

const NONE: never[] = [];

/** The memory of an allocation read() was given, as the parts are asked for. */
class GivenMemory implements PartMemory {
  private payloads: Allocation["payloads"] = [];
  private tensors: Allocation["tensors"] = [];

  of(payloads: Allocation["payloads"], tensors: Allocation["tensors"]): this {
    this.payloads = payloads;
    this.tensors = tensors;
    return this;
  }

  payload(i: number): ArrayBufferView {
    return this.payloads[i]!.data;
  }

  tensor(i: number): TensorBuffer {
    return this.tensors[i]!.buffer;
  }

  tensorDevice(i: number): Device {
    return bufferDevice(this.tensors[i]!.buffer);
  }
}

function noChannel(source: Device, here: Device, i: number): TensorPipeError {
  return new TensorPipeError(ErrorCode.NEGOTIATION, `no channel joins ${deviceKey(source)} at the peer to ${deviceKey(here)} here (tensor ${i})`);
}
