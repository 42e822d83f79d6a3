/**
 * The objects that go with each message (Descriptor, DescriptorReply),
 * encoded with libnop exactly as upstream TensorPipe does
 * (docs/wire-protocol.md), and held to this side's limits as they are decoded.
 */
import type { Device } from "../device.js";
import type { Descriptor } from "../message.js";
import { NopReader } from "../nop/reader.js";
import { NopWriter } from "../nop/writer.js";
import { readDevice, writeDevice } from "./devices.js";

/** The devices a reader chose for tensors sent without a target. */
export interface DescriptorReply {
  /** One per such tensor, in order. */
  targetDevices: Device[];
}

/*
 * A Descriptor's layout, piece by piece, in the order written: its head,
 * each payload, the tensor count, each tensor. Pipe writes a message's
 * descriptor straight from the message with these, with no Descriptor
 * object in between; encodeDescriptor writes one from a Descriptor.
 */

/** A descriptor's head: metadata and payload count. */
export function writeDescriptorHead(w: NopWriter, metadata: string, payloadCount: number): void {
  w.structure(3).string(metadata).array(payloadCount);
}

/** One payload's length and metadata. */
export function writePayloadDescriptor(w: NopWriter, length: number, metadata: string): void {
  w.structure(2).uint(length).string(metadata);
}

/** The number of tensors that follow. */
export function writeTensorCount(w: NopWriter, count: number): void {
  w.array(count);
}

/** One tensor's length, devices and metadata. */
export function writeTensorDescriptor(w: NopWriter, length: number, sourceDevice: Device, targetDevice: Device | undefined, metadata: string): void {
  w.structure(4).uint(length);
  writeDevice(w, sourceDevice);
  if (targetDevice) writeDevice(w, targetDevice);
  else w.empty();
  w.string(metadata);
}

/** A Descriptor as upstream encodes it. */
export function encodeDescriptor(d: Descriptor): Uint8Array {
  const w = new NopWriter(64 + d.metadata.length);
  writeDescriptorHead(w, d.metadata, d.payloads.length);
  for (const p of d.payloads) writePayloadDescriptor(w, p.length, p.metadata);
  writeTensorCount(w, d.tensors.length);
  for (const t of d.tensors) writeTensorDescriptor(w, t.length, t.sourceDevice, t.targetDevice, t.metadata);
  return w.finish();
}

function sized<T>(n: number): T[] {
  return n === 0 ? [] : new Array<T>(n);
}

/**
 * What a reader accepts in one message's descriptor, checked as it is
 * decoded and before anything is allocated for the entries: a peer that
 * announces more fails the pipe, whatever the frame's size allowed.
 */
export interface DescriptorLimits {
  /** Payloads in one message (ContextOptions.maxPayloads). */
  maxPayloads: number;
  /** Tensors in one message (ContextOptions.maxTensors). */
  maxTensors: number;
  /** Payload and tensor bytes one message may announce in all (ContextOptions.maxMessageBytes). */
  maxMessageBytes: number;
}

/** The defaults of ContextOptions' maxPayloads, maxTensors and maxMessageBytes. */
export const DEFAULT_DESCRIPTOR_LIMITS: Readonly<DescriptorLimits> = {
  maxPayloads: 16_384,
  maxTensors: 16_384,
  maxMessageBytes: 2 ** 32,
};

function overLimit(r: NopReader, what: string, n: number, limit: number, option: string): never {
  return r.fail(`announces ${n} ${what}, over the limit of ${limit} (raise ContextOptions.${option} on this side if that is meant)`);
}

/** Decodes a Descriptor; ERR_TP_PROTOCOL on bad bytes or on a message over `limits`. */
export function decodeDescriptor(bytes: Uint8Array, limits: DescriptorLimits = DEFAULT_DESCRIPTOR_LIMITS): Descriptor {
  const r = new NopReader(bytes, "Descriptor");
  r.structure(3, "Descriptor");
  const metadata = r.string();
  let announced = 0;
  const payloadCount = r.array();
  if (payloadCount > limits.maxPayloads) overLimit(r, "payloads", payloadCount, limits.maxPayloads, "maxPayloads");
  // Arrays of the exact size: one pushed onto from empty gets room for 17.
  const payloads: Descriptor["payloads"] = sized(payloadCount);
  for (let i = 0; i < payloads.length; i++) {
    r.structure(2, "Payload");
    const length = r.uint(64);
    announced += length;
    if (announced > limits.maxMessageBytes) overLimit(r, "bytes or more", announced, limits.maxMessageBytes, "maxMessageBytes");
    payloads[i] = { length, metadata: r.string() };
  }
  const tensorCount = r.array();
  if (tensorCount > limits.maxTensors) overLimit(r, "tensors", tensorCount, limits.maxTensors, "maxTensors");
  const tensors: Descriptor["tensors"] = sized(tensorCount);
  for (let i = 0; i < tensors.length; i++) {
    r.structure(4, "Tensor");
    const length = r.uint(64);
    announced += length;
    if (announced > limits.maxMessageBytes) overLimit(r, "bytes or more", announced, limits.maxMessageBytes, "maxMessageBytes");
    const sourceDevice = readDevice(r);
    const targetDevice = r.empty() ? undefined : readDevice(r);
    const metadata = r.string();
    tensors[i] = targetDevice ? { length, sourceDevice, targetDevice, metadata } : { length, sourceDevice, metadata };
  }
  r.end();
  return { metadata, payloads, tensors };
}

/** A DescriptorReply as upstream encodes it. */
export function encodeDescriptorReply(d: DescriptorReply): Uint8Array {
  const w = new NopWriter(32);
  w.structure(1).array(d.targetDevices.length);
  for (const dev of d.targetDevices) writeDevice(w, dev);
  return w.finish();
}

/** Decodes a DescriptorReply; ERR_TP_PROTOCOL on bad bytes. */
export function decodeDescriptorReply(bytes: Uint8Array): DescriptorReply {
  const r = new NopReader(bytes, "DescriptorReply");
  r.structure(1, "DescriptorReply");
  const targetDevices: Device[] = [];
  for (let n = r.array(); n > 0; n--) targetDevices.push(readDevice(r));
  r.end();
  return { targetDevices };
}
