/**
 * Fresh CPU memory for a message a peer announced, carved from one
 * ArrayBuffer: what readMessage() reads into, and what a reader of
 * readDescriptor() may allocate with.
 */
import { CPU_DEVICE, deviceKey } from "./device.js";
import { ErrorCode, TensorPipeError } from "./errors.js";
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

/** Bytes of one buffer that holds every part of `d`, each aligned. */
function bytesFor(d: Descriptor): number {
  let n = 0;
  for (const p of d.payloads) n += Math.ceil(p.length / ALIGN) * ALIGN;
  for (const t of d.tensors) n += Math.ceil(t.length / ALIGN) * ALIGN;
  return n;
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
  for (let i = 0; i < d.tensors.length; i++) {
    const target = d.tensors[i]!.targetDevice ?? CPU_DEVICE;
    if (target.type !== "cpu") {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `tensor ${i} targets ${deviceKey(target)}: use readDescriptor() and read() with device memory`);
    }
  }
  const size = bytesFor(d);
  const memory = reuse !== undefined && reuse.byteLength >= size ? reuse : new ArrayBuffer(size);
  let at = 0;
  const carve = (length: number): Uint8Array => {
    const view = new Uint8Array(memory, at, length);
    at += Math.ceil(length / ALIGN) * ALIGN;
    return view;
  };
  const payloads = new Array<{ data: Uint8Array }>(d.payloads.length);
  for (let i = 0; i < payloads.length; i++) payloads[i] = { data: carve(d.payloads[i]!.length) };
  const tensors = new Array<{ buffer: Uint8Array }>(d.tensors.length);
  for (let i = 0; i < tensors.length; i++) tensors[i] = { buffer: carve(d.tensors[i]!.length) };
  return { payloads, tensors, memory };
}
