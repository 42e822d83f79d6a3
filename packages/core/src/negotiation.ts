/**
 * Transport and channel choice, as upstream TensorPipe makes it: pure
 * functions over what each side advertises, so both ends can be checked
 * without a network.
 */
import type { ChannelContext } from "./channel.js";
import type { Device } from "./device.js";
import { CPU_DEVICE, deviceKey, pairLabel, sameDevice } from "./device.js";
import { ErrorCode, TensorPipeError } from "./errors.js";
import { putWireExtensions } from "./handshake/extensions.js";
import type { PathVerdict } from "./path-report.js";
import { peerExcerpt, peerText } from "./peer-text.js";
import type { Brochure, BrochureAnswer, DeviceDescriptors, DevicePairChoice } from "./protocol/handshake.js";
import type { TransportContext } from "./transport.js";

/** Told why each backend was or was not chosen (for pipe.path and debug logs). */
export type Verdict = (verdict: PathVerdict) => void;

/** A backend as registered with a context. */
export interface Registered<T> {
  /** Higher wins negotiation. */
  priority: number;
  /** The name it is offered under. */
  name: string;
  /** The backend itself. */
  context: T;
}

/** Highest priority first; ties keep registration order. */
export function byPriority<T>(entries: Iterable<Registered<T>>): Registered<T>[] {
  return [...entries].sort((a, b) => b.priority - a.priority);
}

/** A channel's device descriptors keyed by device ("cpu:0"). */
export function localDeviceDescriptors(channel: ChannelContext): DeviceDescriptors {
  const out: DeviceDescriptors = new Map();
  for (const { device, descriptor } of channel.deviceDescriptors()) {
    out.set(deviceKey(device), { device, descriptor });
  }
  return out;
}

/** The connecting side's offer: every viable transport's domain and every viable channel's devices. */
export function buildBrochure(transports: readonly Registered<TransportContext>[], channels: readonly Registered<ChannelContext>[]): Brochure {
  const transportDomainDescriptors = new Map<string, string>();
  for (const t of transports) {
    if (t.context.isViable().viable) transportDomainDescriptors.set(t.name, t.context.domainDescriptor());
  }
  const channelDeviceDescriptors = new Map<string, DeviceDescriptors>();
  for (const c of channels) {
    if (c.context.isViable().viable) channelDeviceDescriptors.set(c.name, localDeviceDescriptors(c.context));
  }
  putWireExtensions(channelDeviceDescriptors, channels);
  return { transportDomainDescriptors, channelDeviceDescriptors };
}

/**
 * The listening side's transport: the highest-priority one it listens on,
 * that the peer has, with an equal domain descriptor.
 */
export function chooseTransport(
  transports: readonly Registered<TransportContext>[],
  listening: ReadonlySet<string>,
  brochure: Brochure,
  note?: Verdict,
): Registered<TransportContext> | undefined {
  let chosen: Registered<TransportContext> | undefined;
  const say = (t: Registered<TransportContext>, outcome: PathVerdict["outcome"], reason: string, by: PathVerdict["by"] = "here") =>
    note?.({ kind: "transport", name: t.name, by, outcome, reason });
  for (const t of transports) {
    const viability = t.context.isViable();
    if (!viability.viable) {
      say(t, "not viable", `not viable here: ${viability.reason}`);
      continue;
    }
    if (!listening.has(t.name)) {
      say(t, "not listened on", "not listened on");
      continue;
    }
    const remote = brochure.transportDomainDescriptors.get(t.name);
    if (remote === undefined) {
      say(t, "not offered", "the peer does not offer it", "there");
      continue;
    }
    const local = t.context.domainDescriptor();
    if (remote !== local) {
      const why = t.context.describeMismatch?.(local, remote);
      say(t, "descriptors differ", `domains differ ("${local}" here, "${peerText(remote, 256)}" there)${why ? `: ${why}` : ""}`);
    } else if (chosen) {
      say(t, "lower priority", `usable, but ${chosen.name} has a higher priority (${chosen.priority} against ${t.priority})`);
    } else {
      say(t, "chosen", `chosen (priority ${t.priority})`);
      chosen = t;
      // Without a listener for the verdicts, the rest need not be looked at.
      if (!note) return t;
    }
  }
  return chosen;
}

/** The listening side's channels for a pipe. */
export interface ChannelChoice {
  /** Channels that serve at least one device pair, in priority order. */
  selected: Registered<ChannelContext>[];
  /** Per selected channel, this side's device descriptors, and their wire extensions (sent in the answer). */
  deviceDescriptors: Map<string, DeviceDescriptors>;
  /** The channel for each (device here, device there) pair. */
  pairs: DevicePairChoice[];
}

/**
 * In priority order, every (local device, remote device) pair whose
 * descriptors match and that no better channel took gets that channel.
 */
export function chooseChannels(channels: readonly Registered<ChannelContext>[], brochure: Brochure, note?: Verdict): ChannelChoice {
  const taken = new Map<string, string>();
  const choice: ChannelChoice = { selected: [], deviceDescriptors: new Map(), pairs: [] };
  for (const c of channels) {
    const say = (outcome: PathVerdict["outcome"], reason: string, pair?: string, by: PathVerdict["by"] = "here") =>
      note?.({ kind: "channel", name: c.name, ...(pair === undefined ? {} : { pair }), by, outcome, reason });
    const viability = c.context.isViable();
    if (!viability.viable) {
      say("not viable", `not viable here: ${viability.reason}`);
      continue;
    }
    const remoteDevices = brochure.channelDeviceDescriptors.get(c.name);
    if (!remoteDevices) {
      say("not offered", "the peer does not offer it", undefined, "there");
      continue;
    }
    const localDevices = localDeviceDescriptors(c.context);
    let needed = false;
    for (const local of localDevices.values()) {
      for (const remote of remoteDevices.values()) {
        const key = pairKey(local.device, remote.device);
        // The remote device's type is the peer's text, in every verdict on the pair.
        const pair = peerText(pairLabel(local.device, remote.device), 128);
        if (taken.has(key)) {
          say("lower priority", `taken by ${taken.get(key)}, a channel of higher priority`, pair);
          continue;
        }
        if (!c.context.canCommunicateWithRemote(local.descriptor, remote.descriptor)) {
          if (note) {
            const why = c.context.describeMismatch?.(local.descriptor, remote.descriptor);
            say(
              "descriptors differ",
              `descriptors do not match ("${local.descriptor}" here, "${peerText(remote.descriptor, 256)}" there)${why ? `: ${why}` : ""}`,
              pair,
            );
          }
          continue;
        }
        taken.set(key, c.name);
        choice.pairs.push({ local: local.device, remote: remote.device, channel: c.name });
        say("chosen", `chosen (priority ${c.priority})`, pair);
        needed = true;
      }
    }
    if (needed) {
      choice.selected.push(c);
      choice.deviceDescriptors.set(c.name, localDevices);
    }
  }
  putWireExtensions(choice.deviceDescriptors, choice.selected);
  return choice;
}

function negotiationError(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.NEGOTIATION, message);
}

/**
 * The connecting side checks the listener's choices against what it has,
 * and returns the channel for each (local, remote) pair from its own side.
 */
export function checkAnswer(
  transports: ReadonlyMap<string, TransportContext>,
  channels: ReadonlyMap<string, ChannelContext>,
  answer: BrochureAnswer,
): DevicePairChoice[] {
  const transport = transports.get(answer.transport);
  if (!transport) throw negotiationError(`peer chose transport ${peerExcerpt(answer.transport)}, which this side lacks`);
  if (transport.domainDescriptor() !== answer.transportDomainDescriptor) {
    throw negotiationError(
      `transport "${answer.transport}" domains differ: "${transport.domainDescriptor()}" here, ${peerExcerpt(answer.transportDomainDescriptor)} there`,
    );
  }
  const pairs: DevicePairChoice[] = [];
  for (const { local: remoteDevice, remote: localDevice, channel: name } of answer.channelForDevicePair) {
    const channel = channels.get(name);
    if (!channel) throw negotiationError(`peer chose channel ${peerExcerpt(name)}, which this side lacks`);
    if (!answer.channelRegistrationIds.has(name)) {
      throw negotiationError(`peer chose channel "${name}" but registered no connections for it`);
    }
    const localDescriptor = localDeviceDescriptors(channel).get(deviceKey(localDevice))?.descriptor;
    const remoteDescriptor = answer.channelDeviceDescriptors.get(name)?.get(deviceKey(remoteDevice))?.descriptor;
    if (localDescriptor === undefined || remoteDescriptor === undefined || !channel.canCommunicateWithRemote(localDescriptor, remoteDescriptor)) {
      throw negotiationError(`channel "${name}" cannot join ${peerExcerpt(deviceKey(localDevice))} here to ${peerExcerpt(deviceKey(remoteDevice))} there`);
    }
    pairs.push({ local: localDevice, remote: remoteDevice, channel: name });
  }
  for (const [name, ids] of answer.channelRegistrationIds) {
    const channel = channels.get(name);
    if (!channel) throw negotiationError(`peer registered connections for unknown channel ${peerExcerpt(name)}`);
    const accepted = channel.acceptsConnectionCount?.(ids.length) ?? ids.length === channel.numConnectionsNeeded();
    if (!accepted) {
      throw negotiationError(`channel "${name}" needs ${channel.numConnectionsNeeded()} connection(s), peer registered ${ids.length}`);
    }
  }
  return pairs;
}

/** Each pair's devices and channel, for logs: "cpu:0->cuda:1: cuda-basic, ...", or "none". */
export function describePairs(pairs: readonly DevicePairChoice[]): string {
  return pairs.map((p) => `${pairLabel(p.local, p.remote)}: ${p.channel}`).join(", ") || "none";
}

/** Whether `pairs` carry CPU tensors both ways: without that, every CPU tensor would fail on its first write. */
export function carriesCpuTensors(pairs: readonly DevicePairChoice[]): boolean {
  return pairs.some((p) => sameDevice(p.local, CPU_DEVICE) && sameDevice(p.remote, CPU_DEVICE));
}

/** A (local, remote) device pair as a string key. */
export function pairKey(local: Device, remote: Device): string {
  return `${deviceKey(local)}|${deviceKey(remote)}`;
}
