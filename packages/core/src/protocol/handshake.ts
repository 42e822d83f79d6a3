/**
 * The objects of upstream TensorPipe's handshake (Packet, Brochure,
 * BrochureAnswer), encoded with libnop exactly as the C++ library does
 * (docs/wire-protocol.md), and bounded as they are decoded.
 */
import type { Device } from "../device.js";
import { deviceKey } from "../device.js";
import { NopReader } from "../nop/reader.js";
import { NopWriter } from "../nop/writer.js";
import { readDevice, writeDevice } from "./devices.js";

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
