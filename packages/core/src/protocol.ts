/**
 * The upstream TensorPipe handshake and message objects, encoded with libnop
 * exactly as the C++ library does (see shared/protocol/PROTOCOL.md).
 */
import type { Device } from "./device.js";
import { CPU_DEVICE, deviceKey } from "./device.js";
import type { Descriptor } from "./message.js";
import { NopReader, NopWriter } from "./nop.js";
import { peerExcerpt } from "./peer-text.js";

/** The first frame on every connection: a new pipe, or a connection a handshake asked for. */
export type Packet =
  | {
      /** A new pipe: the connecting side's brochure follows. */
      kind: "spontaneous";
      /** The connecting context's name. */
      contextName: string;
    }
  | {
      /** A connection the listener registered in its answer. */
      kind: "requested";
      /** The id the answer gave it (any 64-bit value: random on our side, a counter on upstream's). */
      registrationId: bigint;
    };

/** Device descriptors of one channel, keyed by deviceKey(). */
export type DeviceDescriptors = Map<
  string,
  {
    /** The device. */
    device: Device;
    /** What the peer's channel compares. */
    descriptor: string;
  }
>;

/** The connecting side's offer. */
export interface Brochure {
  /** Each transport's domain descriptor, by name. */
  transportDomainDescriptors: Map<string, string>;
  /** Each channel's device descriptors, by name. */
  channelDeviceDescriptors: Map<string, DeviceDescriptors>;
}

/** The channel chosen for one device pair. */
export interface DevicePairChoice {
  /** From the point of view of the side that wrote the answer. */
  local: Device;
  /** The device at the other end. */
  remote: Device;
  /** The channel's name. */
  channel: string;
}

/** transportRegistrationIds keys. */
export const ConnectionKind = {
  /** The pipe's main connection, when the transport differs from the first connection's. */
  MAIN: 0,
  /** The connection that carries DescriptorReplies. */
  REPLY: 1,
} as const;

/** The listening side's choices, and the connections it waits for. */
export interface BrochureAnswer {
  /** The transport chosen. */
  transport: string;
  /** Where to open the pipe's connections. */
  address: string;
  /** Registration ids of the main and reply connections (ConnectionKind keys). */
  transportRegistrationIds: Map<number, bigint>;
  /** The chosen transport's domain descriptor, for the other side to check. */
  transportDomainDescriptor: string;
  /** Registration ids of each channel's connections. */
  channelRegistrationIds: Map<string, bigint[]>;
  /** The listening side's descriptors of the channels chosen. */
  channelDeviceDescriptors: Map<string, DeviceDescriptors>;
  /** The channel of each device pair. */
  channelForDevicePair: DevicePairChoice[];
}

/** The devices a reader chose for tensors sent without a target. */
export interface DescriptorReply {
  /** One per such tensor, in order. */
  targetDevices: Device[];
}

/**
 * The most entries (transports, channels, devices, registration ids,
 * device pairs) one Brochure or BrochureAnswer may hold. A machine with 16
 * GPUs and every channel this project has offers under 200; a peer's
 * brochure of a million tiny entries cost the listener 20 times its bytes
 * in decoded objects, and the time to walk them, before any check.
 */
export const MAX_HANDSHAKE_ENTRIES = 1024;

/** Counts a handshake object's entries as they are announced, before anything is made for them. */
class Entries {
  private left = MAX_HANDSHAKE_ENTRIES;

  constructor(private readonly r: NopReader) {}

  /** The entries still allowed. */
  get remaining(): number {
    return this.left;
  }

  /** Counts `n` more; ERR_TP_PROTOCOL past the bound. */
  take(n: number): number {
    if (n > this.left) this.r.fail(`holds more than ${MAX_HANDSHAKE_ENTRIES} entries (transports, channels, devices, connections)`);
    this.left -= n;
    return n;
  }
}

// The CPU device as libnop writes it: most devices on the wire are this one.
const CPU_ENCODED = Uint8Array.from(new NopWriter(8).structure(2).string("cpu").int(0).finish());

function writeDevice(w: NopWriter, d: Device): void {
  if (d === CPU_DEVICE) w.raw(CPU_ENCODED);
  else w.structure(2).string(d.type).int(d.index);
}

/**
 * What a device type is: a name ("cpu", "cuda"). A peer's device types
 * end up in keys, logs, errors and pipe.path; one that is not a name (a
 * terminal's escape sequence, a line break, 200 KB) fails the frame.
 */
const DEVICE_TYPE = /^[A-Za-z0-9_.-]{1,64}$/;

/** The device at the reader; the CPU is always the one CPU_DEVICE object. */
function readDevice(r: NopReader): Device {
  if (r.skip(CPU_ENCODED)) return CPU_DEVICE;
  r.structure(2, "Device");
  const type = r.string();
  if (!DEVICE_TYPE.test(type)) r.fail(`device type ${peerExcerpt(type)} is not a name of at most 64 characters [A-Za-z0-9_.-]`);
  const index = r.int(32);
  return { type, index };
}

function writeDeviceDescriptors(w: NopWriter, m: DeviceDescriptors): void {
  w.map(m.size);
  for (const { device, descriptor } of m.values()) {
    writeDevice(w, device);
    w.string(descriptor);
  }
}

function readDeviceDescriptors(r: NopReader, entries: Entries): DeviceDescriptors {
  const out: DeviceDescriptors = new Map();
  for (let n = entries.take(r.map()); n > 0; n--) {
    const device = readDevice(r);
    out.set(deviceKey(device), { device, descriptor: r.string() });
  }
  return out;
}

function writeChannelDeviceDescriptors(w: NopWriter, m: Map<string, DeviceDescriptors>): void {
  w.map(m.size);
  for (const [name, devices] of m) {
    w.string(name);
    writeDeviceDescriptors(w, devices);
  }
}

function readChannelDeviceDescriptors(r: NopReader, entries: Entries): Map<string, DeviceDescriptors> {
  const out = new Map<string, DeviceDescriptors>();
  for (let n = entries.take(r.map()); n > 0; n--) {
    const name = r.string();
    out.set(name, readDeviceDescriptors(r, entries));
  }
  return out;
}

/** A Packet as upstream encodes it. */
export function encodePacket(p: Packet): Uint8Array {
  const w = new NopWriter(16);
  if (p.kind === "spontaneous") w.variant(0).structure(1).string(p.contextName);
  else w.variant(1).structure(1).uint(p.registrationId);
  return w.finish();
}

/** Decodes a Packet; ERR_TP_PROTOCOL on bad bytes. */
export function decodePacket(bytes: Uint8Array): Packet {
  const r = new NopReader(bytes, "Packet");
  const index = r.variant();
  let p: Packet;
  if (index === 0) {
    r.structure(1, "SpontaneousConnection");
    p = { kind: "spontaneous", contextName: r.string() };
  } else if (index === 1) {
    r.structure(1, "RequestedConnection");
    p = { kind: "requested", registrationId: r.uintBig() };
  } else {
    return r.fail(`unknown packet variant ${index}`);
  }
  r.end();
  return p;
}

/** A Brochure as upstream encodes it. */
export function encodeBrochure(b: Brochure): Uint8Array {
  const w = new NopWriter();
  w.structure(2).map(b.transportDomainDescriptors.size);
  for (const [name, domain] of b.transportDomainDescriptors) w.string(name).string(domain);
  writeChannelDeviceDescriptors(w, b.channelDeviceDescriptors);
  return w.finish();
}

/** Decodes a Brochure; ERR_TP_PROTOCOL on bad bytes. */
export function decodeBrochure(bytes: Uint8Array): Brochure {
  const r = new NopReader(bytes, "Brochure");
  const entries = new Entries(r);
  r.structure(2, "Brochure");
  const transportDomainDescriptors = new Map<string, string>();
  for (let n = entries.take(r.map()); n > 0; n--) {
    const name = r.string();
    transportDomainDescriptors.set(name, r.string());
  }
  const channelDeviceDescriptors = readChannelDeviceDescriptors(r, entries);
  r.end();
  return { transportDomainDescriptors, channelDeviceDescriptors };
}

/** A BrochureAnswer as upstream encodes it. */
export function encodeBrochureAnswer(a: BrochureAnswer): Uint8Array {
  const w = new NopWriter();
  w.structure(7).string(a.transport).string(a.address);
  w.map(a.transportRegistrationIds.size);
  for (const [kind, id] of a.transportRegistrationIds) w.uint(kind).uint(id);
  w.string(a.transportDomainDescriptor);
  w.map(a.channelRegistrationIds.size);
  for (const [name, ids] of a.channelRegistrationIds) w.string(name).u64Vector(ids);
  writeChannelDeviceDescriptors(w, a.channelDeviceDescriptors);
  w.map(a.channelForDevicePair.length);
  for (const c of a.channelForDevicePair) {
    w.array(2);
    writeDevice(w, c.local);
    writeDevice(w, c.remote);
    w.string(c.channel);
  }
  return w.finish();
}

/** Decodes a BrochureAnswer; ERR_TP_PROTOCOL on bad bytes. */
export function decodeBrochureAnswer(bytes: Uint8Array): BrochureAnswer {
  const r = new NopReader(bytes, "BrochureAnswer");
  const entries = new Entries(r);
  r.structure(7, "BrochureAnswer");
  const transport = r.string();
  const address = r.string();
  const transportRegistrationIds = new Map<number, bigint>();
  for (let n = entries.take(r.map()); n > 0; n--) {
    const kind = r.uint(64);
    transportRegistrationIds.set(kind, r.uintBig());
  }
  const transportDomainDescriptor = r.string();
  const channelRegistrationIds = new Map<string, bigint[]>();
  for (let n = entries.take(r.map()); n > 0; n--) {
    const name = r.string();
    const ids = r.u64Vector(entries.remaining);
    entries.take(ids.length);
    channelRegistrationIds.set(name, ids);
  }
  const channelDeviceDescriptors = readChannelDeviceDescriptors(r, entries);
  const channelForDevicePair: DevicePairChoice[] = [];
  for (let n = entries.take(r.map()); n > 0; n--) {
    if (r.array() !== 2) r.fail("device pair is not a pair");
    const local = readDevice(r);
    const remote = readDevice(r);
    channelForDevicePair.push({ local, remote, channel: r.string() });
  }
  r.end();
  return {
    transport,
    address,
    transportRegistrationIds,
    transportDomainDescriptor,
    channelRegistrationIds,
    channelDeviceDescriptors,
    channelForDevicePair,
  };
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
export function writeTensorDescriptor(
  w: NopWriter,
  length: number,
  sourceDevice: Device,
  targetDevice: Device | undefined,
  metadata: string,
): void {
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
