/**
 * What tensorpipe-js adds to upstream's brochure and answer, in one place:
 * entries under names no backend may have (tensorpipe-js.*), which
 * upstream TensorPipe passes over as it passes over any backend it lacks
 * (docs/wire-protocol.md). Each is put in here, read back here, and
 * stripped here from a peer's offer before the offer is judged or shown.
 */
import type { ChannelContext } from "../channel.js";
import { deviceKey } from "../device.js";
import type { Registered } from "../negotiation.js";
import type { Brochure, DeviceDescriptors } from "../protocol/handshake.js";

/** The names of every entry of ours begin so; a backend's may not. */
export const EXTENSION_PREFIX = "tensorpipe-js.";

/**
 * The shared-secret handshake (auth.ts): a brochure's hello or proof
 * under this transport name, and the listener's challenge as an answer
 * for this "transport".
 */
export const AUTH_ENTRY = "tensorpipe-js.auth.hmac-sha256";

/**
 * One side's path report (path-report.ts), among the channels: in the
 * brochure what the connecting side left out and why, in the answer the
 * listener's judgement. One "device", report:0, whose descriptor is JSON.
 */
export const PATH_REPORT_ENTRY = "tensorpipe-js.path-report";

/**
 * What channels add to upstream's wire (ChannelContext.wireExtension),
 * among the channels: one "device" per channel, named as the channel,
 * whose descriptor is the extension.
 */
export const WIRE_EXTENSIONS_ENTRY = "tensorpipe-js.wire-extensions";

/**
 * A context's name (ContextOptions.name), bound to the handshake. The
 * dialler's name travels in upstream's SpontaneousConnection packet; under
 * authentication its proof brochure adds, here among the transports, an
 * HMAC over the name and both nonces. The listener's answer carries its
 * name among the channels (device name:0) and, under authentication, the
 * HMAC (device proof:0).
 */
export const NAME_ENTRY = "tensorpipe-js.name";

/** The most characters of a peer's name that a pipe reports (Pipe.peerName). */
export const MAX_PEER_NAME = 1024;

/** A peer's name as a pipe reports it: undefined for none, for one over MAX_PEER_NAME characters, or one with control characters. */
export function reportedName(name: string | undefined): string | undefined {
  if (!name || name.length > MAX_PEER_NAME || /\p{Cc}/u.test(name)) return undefined;
  return name;
}

/** The entries, where each sits in a brochure. */
export const BROCHURE_EXTENSIONS: readonly { readonly name: string; readonly sits: "transports" | "channels" }[] = [
  { name: AUTH_ENTRY, sits: "transports" },
  { name: NAME_ENTRY, sits: "transports" },
  { name: PATH_REPORT_ENTRY, sits: "channels" },
  { name: WIRE_EXTENSIONS_ENTRY, sits: "channels" },
];

/** Whether `name` is one of ours rather than a backend's. */
export function isExtensionName(name: string): boolean {
  return name.startsWith(EXTENSION_PREFIX);
}

/** What a peer's brochure or answer carried in the entries of ours. */
export interface PeerExtensions {
  /** A brochure's shared-secret entry (hello or proof). */
  readonly auth: string | undefined;
  /** The peer's path report as it travels (JSON), to be read with peerReport(). */
  readonly report: string | undefined;
  /** Each channel's wire extension, by channel name. */
  readonly wire: ReadonlyMap<string, string>;
  /** A brochure's proof of the name its packet gave; an answer's name and its proof. */
  readonly name: { readonly name?: string | undefined; readonly proof?: string | undefined };
}

const REPORT_DEVICE = { type: "report", index: 0 };
const NAME_DEVICE = { type: "name", index: 0 };
const NAME_PROOF_DEVICE = { type: "proof", index: 0 };

/** Reads the entries of ours out of a peer's brochure (`transports` too) or answer (its channels alone). */
export function readExtensions(channels: ReadonlyMap<string, DeviceDescriptors>, transports?: ReadonlyMap<string, string>): PeerExtensions {
  const wire = new Map<string, string>();
  for (const { device, descriptor } of channels.get(WIRE_EXTENSIONS_ENTRY)?.values() ?? []) {
    if (device.index === 0) wire.set(device.type, descriptor);
  }
  return {
    auth: transports?.get(AUTH_ENTRY),
    report: channels.get(PATH_REPORT_ENTRY)?.get(deviceKey(REPORT_DEVICE))?.descriptor,
    wire,
    name: transports
      ? { proof: transports.get(NAME_ENTRY) }
      : {
          name: channels.get(NAME_ENTRY)?.get(deviceKey(NAME_DEVICE))?.descriptor,
          proof: channels.get(NAME_ENTRY)?.get(deviceKey(NAME_PROOF_DEVICE))?.descriptor,
        },
  };
}

/** Takes every entry of ours out of `brochure`: what is left is upstream's part, which is judged and shown. */
export function stripExtensions(brochure: Brochure): void {
  for (const name of brochure.transportDomainDescriptors.keys()) if (isExtensionName(name)) brochure.transportDomainDescriptors.delete(name);
  for (const name of brochure.channelDeviceDescriptors.keys()) if (isExtensionName(name)) brochure.channelDeviceDescriptors.delete(name);
}

/** Puts a shared-secret entry into a brochure. */
export function putAuth(brochure: Brochure, entry: string): void {
  brochure.transportDomainDescriptors.set(AUTH_ENTRY, entry);
}

/** Puts the proof of the name a brochure's packet gave among its transports. */
export function putNameProof(brochure: Brochure, proof: string): void {
  brochure.transportDomainDescriptors.set(NAME_ENTRY, proof);
}

/** Puts a listener's name, and its proof under authentication, among an answer's `channels`. */
export function putName(channels: Map<string, DeviceDescriptors>, name: string, proof: string | undefined): void {
  const entry: DeviceDescriptors = new Map([[deviceKey(NAME_DEVICE), { device: NAME_DEVICE, descriptor: name }]]);
  if (proof !== undefined) entry.set(deviceKey(NAME_PROOF_DEVICE), { device: NAME_PROOF_DEVICE, descriptor: proof });
  channels.set(NAME_ENTRY, entry);
}

/** Puts a path report (JSON) among `channels`. */
export function putReport(channels: Map<string, DeviceDescriptors>, report: string): void {
  channels.set(PATH_REPORT_ENTRY, new Map([[deviceKey(REPORT_DEVICE), { device: REPORT_DEVICE, descriptor: report }]]));
}

/** Puts the wire extensions of `offered` among `channels` (nothing when none has one). */
export function putWireExtensions(channels: Map<string, DeviceDescriptors>, offered: Iterable<Registered<ChannelContext>>): void {
  let entry: DeviceDescriptors | undefined;
  for (const c of offered) {
    const extension = c.context.wireExtension?.();
    if (extension === undefined || !c.context.isViable().viable) continue;
    const device = { type: c.name, index: 0 };
    (entry ??= new Map()).set(deviceKey(device), { device, descriptor: extension });
  }
  if (entry) channels.set(WIRE_EXTENSIONS_ENTRY, entry);
}
