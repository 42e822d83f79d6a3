/**
 * A message on its way out: checked whole, once, before a byte of it is
 * encoded (what write() refuses leaves the pipe as it was), then its
 * descriptor encoded in one pass. The same objects serve message after
 * message: the hot path makes no garbage for them.
 */
import { type Device, CPU_DEVICE, bufferDevice, deviceKey } from "../device.js";
import { ErrorCode, TensorPipeError } from "../errors.js";
import type { Message, MessagePayload, MessageTensor } from "../message.js";
import { badPayload, checkDevice, checkMessageShape, checkTensorBuffer, detachedPart, isDetached } from "../message-check.js";
import type { NopWriter } from "../nop/writer.js";
import { writeDescriptorHead, writePayloadDescriptor, writeTensorCount, writeTensorDescriptor } from "../protocol/message.js";
import type { ChannelRoutes } from "./routes.js";

const NONE: readonly never[] = [];

function invalid(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.INVALID_ARG, message);
}

/** Where `t` goes at the peer: as given; the CPU for a CPU tensor given none; undefined for the peer to choose. */
export function targetOf(t: MessageTensor, source: Device): Device | undefined {
  if (t.targetDevice !== undefined) return t.targetDevice ?? undefined;
  return source === CPU_DEVICE ? CPU_DEVICE : undefined;
}

/** The bytes of `t` that go out. */
export function tensorLength(t: MessageTensor): number {
  return t.length ?? t.buffer.byteLength;
}

/** A checked message: its parts and what was learnt of them. */
export class OutgoingMessage {
  metadata = "";
  payloads: readonly MessagePayload[] = NONE;
  tensors: readonly MessageTensor[] = NONE;
  /** Each tensor's length, device here and device at the peer (undefined: the peer picks). */
  readonly lengths: number[] = [];
  readonly sources: Device[] = [];
  readonly targets: (Device | undefined)[] = [];
  /** Tensors whose device the peer picks, in a DescriptorReply. */
  missingTargets = 0;
  /** Payload and tensor bytes. */
  bytes = 0;

  /**
   * Takes `message` after checking all of it against the channels of
   * `routes`: ERR_TP_INVALID_ARG saying which part is wrong and how to fix
   * it, or ERR_TP_NEGOTIATION where no channel was negotiated for a tensor.
   */
  check(message: Message, routes: ChannelRoutes): this {
    checkMessageShape(message);
    const payloads = message.payloads ?? NONE;
    const tensors = message.tensors ?? NONE;
    let bytes = 0;
    for (let i = 0; i < payloads.length; i++) {
      const p = payloads[i]!;
      if (!ArrayBuffer.isView(p?.data)) throw badPayload(i, p);
      if (isDetached(p.data)) throw detachedPart("payload", i);
      bytes += p.data.byteLength;
    }
    // Set only when it changes: an array shortened and grown again gets a fresh backing store.
    if (this.lengths.length !== tensors.length) this.lengths.length = this.sources.length = this.targets.length = tensors.length;
    let missing = 0;
    for (let i = 0; i < tensors.length; i++) {
      const t = tensors[i]!;
      checkTensorBuffer(i, t);
      if (ArrayBuffer.isView(t.buffer) && isDetached(t.buffer)) throw detachedPart("tensor", i);
      if (t.targetDevice != null) checkDevice(i, t.targetDevice);
      const length = tensorLength(t);
      if (!Number.isSafeInteger(length) || length < 0 || length > t.buffer.byteLength) {
        throw invalid(`tensor ${i}: length must be a whole number of bytes from 0 to its buffer's ${t.buffer.byteLength}, got ${String(length)}`);
      }
      const source = bufferDevice(t.buffer);
      const target = targetOf(t, source);
      if (target && !routes.between(source, target)) {
        throw new TensorPipeError(
          ErrorCode.NEGOTIATION,
          `no channel was negotiated from ${deviceKey(source)} here to ${deviceKey(target)} at the peer (channels: ${routes.describe()}): register a channel for it on both ends (for CPU tensors, basic works everywhere); pipe.path says why each was passed over`,
        );
      }
      if (!target) {
        if (!routes.sendsFrom(source)) {
          throw new TensorPipeError(
            ErrorCode.NEGOTIATION,
            `no channel was negotiated for tensors from ${deviceKey(source)} here (channels: ${routes.describe()}): register a channel for it on both ends`,
          );
        }
        missing++;
      }
      this.lengths[i] = length;
      this.sources[i] = source;
      this.targets[i] = target;
      bytes += length;
    }
    this.metadata = message.metadata ?? "";
    this.payloads = payloads;
    this.tensors = tensors;
    this.missingTargets = missing;
    this.bytes = bytes;
    return this;
  }

  /** Forgets the message, so that the pipe does not keep the caller's memory alive. */
  clear(): void {
    this.payloads = this.tensors = NONE;
  }

  /**
   * Its descriptor, encoded into `w` (reset first): ERR_TP_INVALID_ARG when
   * it is longer than `maxLength`, which the peer would take for an attack.
   */
  encode(w: NopWriter, maxLength: number): void {
    w.reset();
    writeDescriptorHead(w, this.metadata, this.payloads.length);
    for (const p of this.payloads) writePayloadDescriptor(w, p.data.byteLength, p.metadata ?? "");
    writeTensorCount(w, this.tensors.length);
    for (let i = 0; i < this.tensors.length; i++) {
      writeTensorDescriptor(w, this.lengths[i]!, this.sources[i]!, this.targets[i], this.tensors[i]!.metadata ?? "");
    }
    // Past the peer's limit (this side's, unless set otherwise there) it would end the pipe.
    const encoded = w.finish().length;
    if (encoded > maxLength) {
      throw invalid(
        `message descriptor (metadata and per-entry metadata) is ${encoded} bytes, over the limit of ${maxLength} (ContextOptions.maxControlFrameLength, at both ends): send large data as a payload or a tensor`,
      );
    }
  }
}
