/**
 * Fresh CPU memory for a message a peer announced: carved from one
 * ArrayBuffer by allocateMessage(), for a reader of readDescriptor(); or
 * made part by part as the parts are asked for, for readMessage()
 * (IncomingMemory), so that a message only announced costs no more than
 * the window of parts asked for at once.
 */
import type { TensorLanding } from "./channel.js";
import { type Device, CPU_DEVICE, deviceKey } from "./device.js";
import { ErrorCode, TensorPipeError } from "./errors.js";
import { adoptLent } from "./lent-views.js";
import type { Descriptor } from "./message.js";

/** Where each part starts: a multiple of 64, so that any TypedArray (and a cache line) fits its start. */
const ALIGN = 64;

/** Memory for every payload and tensor of one message, in one buffer. */
export interface MessageMemory {
  /** One per payload, exactly its length. */
  payloads: {
    /** Where the payload lands. */
    data: Uint8Array;
  }[];
  /** One per tensor, exactly its length. */
  tensors: {
    /** Where the tensor lands. */
    buffer: Uint8Array;
  }[];
  /** The buffer they are all views of: pass it back to allocateMessage() to reuse it. */
  memory: ArrayBuffer;
}

const aligned = (n: number): number => Math.ceil(n / ALIGN) * ALIGN;

/** Bytes of one buffer that holds every part of `d`, each aligned. */
function bytesFor(d: Descriptor): number {
  let n = 0;
  for (const p of d.payloads) n += aligned(p.length);
  for (const t of d.tensors) n += aligned(t.length);
  return n;
}

/** ERR_TP_INVALID_ARG unless every tensor of `d` goes to the CPU. */
function checkCpuTargets(d: Descriptor): void {
  for (let i = 0; i < d.tensors.length; i++) {
    const target = d.tensors[i]!.targetDevice ?? CPU_DEVICE;
    if (target.type !== "cpu") {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `tensor ${i} targets ${deviceKey(target)}: use readDescriptor() and read() with device memory`);
    }
  }
}

/**
 * CPU memory for the message of `d`: views of one buffer (`reuse` when it
 * is large enough, else a fresh one), each part aligned to 64 bytes. A
 * fresh buffer costs address space at once and memory only as bytes land:
 * the system hands a large zeroed buffer out as untouched pages, where one
 * buffer for each part would have cost every part its pages at once (a
 * peer announcing 16,384 tensors of 128 KiB had cost 1.1 GB before a byte
 * of them came). Holding one of the views holds the whole buffer.
 * ERR_TP_INVALID_ARG for a tensor that targets another device.
 */
export function allocateMessage(d: Descriptor, reuse?: ArrayBuffer): MessageMemory {
  checkCpuTargets(d);
  const size = bytesFor(d);
  const memory = reuse !== undefined && reuse.byteLength >= size ? reuse : new ArrayBuffer(size);
  let at = 0;
  const carve = (length: number): Uint8Array => {
    const view = new Uint8Array(memory, at, length);
    at += aligned(length);
    return view;
  };
  const payloads = new Array<{ data: Uint8Array }>(d.payloads.length);
  for (let i = 0; i < payloads.length; i++) payloads[i] = { data: carve(d.payloads[i]!.length) };
  const tensors = new Array<{ buffer: Uint8Array }>(d.tensors.length);
  for (let i = 0; i < tensors.length; i++) tensors[i] = { buffer: carve(d.tensors[i]!.length) };
  return { payloads, tensors, memory };
}

/** The largest buffer IncomingMemory makes at once for parts that share one. */
const SEGMENT = 16 * 1024 * 1024;
const NO_ROOM = new ArrayBuffer(0);
/** Tensors past this size may come lent (Channel.recvLent): they get no room in a shared buffer ahead of time. */
const LENDABLE = 64 * 1024;

/**
 * CPU memory for the message of `d`, each part made when it is asked for,
 * in order: carved from buffers of up to 16 MiB (one exact buffer for a
 * message that fits), a larger part a buffer of its own. What was asked
 * for is kept in `payloads` and `tensors`. ERR_TP_INVALID_ARG for a tensor
 * that targets another device.
 */
export class IncomingMemory {
  readonly payloads: Uint8Array[];
  readonly tensors: Uint8Array[];
  /** What gives back the views the sender lent, one per such tensor. */
  private readonly releases: (() => void)[] = [];
  /** Starts as no room at all, shared: a buffer made per message was most of a reading worker's mallocs. */
  private segment = NO_ROOM;
  private used = 0;
  /** Aligned bytes of the parts not yet made. */
  private left: number;

  constructor(
    readonly descriptor: Descriptor,
    private readonly lending = false,
  ) {
    checkCpuTargets(descriptor);
    this.payloads = new Array<Uint8Array>(descriptor.payloads.length);
    this.tensors = new Array<Uint8Array>(descriptor.tensors.length);
    let left = bytesFor(descriptor);
    if (lending) for (const t of descriptor.tensors) if (t.length > LENDABLE) left -= aligned(t.length);
    this.left = left;
  }

  payload(i: number, length: number): Uint8Array {
    return (this.payloads[i] = this.carve(length));
  }

  tensor(i: number, length: number): Uint8Array {
    return (this.tensors[i] = this.lending && length > LENDABLE ? new Uint8Array(length) : this.carve(length));
  }

  tensorDevice(): Device {
    return CPU_DEVICE;
  }

  /** Whether a tensor came as a view the sender lent. */
  get lent(): boolean {
    return this.releases.length > 0;
  }

  /** Gives back every view the sender lent (each release does nothing the second time). */
  releaseLent(): void {
    for (const release of this.releases) release();
  }

  landing(i: number, length: number): TensorLanding {
    return {
      make: () => this.tensor(i, length),
      adopt: (view, release) => {
        this.tensors[i] = view;
        this.releases.push(adoptLent(view, release));
      },
    };
  }

  private carve(length: number): Uint8Array {
    // Never a view of NO_ROOM, which a user could detach for every message after.
    if (length === 0) return new Uint8Array(0);
    const size = aligned(length);
    if (this.used + size > this.segment.byteLength) {
      this.segment = new ArrayBuffer(Math.max(size, Math.min(SEGMENT, this.left)));
      this.used = 0;
    }
    const view = new Uint8Array(this.segment, this.used, length);
    this.used += size;
    this.left -= size;
    return view;
  }
}
