/**
 * Which channel of a pipe carries a tensor between a device here and one
 * at the peer, as negotiated: looked up on every message, so the CPU pair,
 * by far the most common, is found without building a key.
 */
import type { Channel } from "../channel.js";
import { CPU_DEVICE, type Device, sameDevice } from "../device.js";
import type { Descriptor } from "../message.js";
import { describePairs, pairKey } from "../negotiation.js";
import type { DevicePairChoice } from "../protocol/handshake.js";
import type { ChannelStats, PipeCounters } from "../stats.js";

/** A pipe's channels by device pair, each with its name and counters. */
export class ChannelRoutes {
  private readonly byPair = new Map<string, Channel>();
  private readonly cpu?: Channel;
  private readonly info = new Map<Channel, { name: string; stats: ChannelStats }>();

  constructor(
    /** The channel of each (device here, device there) pair. */
    readonly pairs: readonly DevicePairChoice[],
    channels: ReadonlyMap<string, Channel>,
    counters: PipeCounters,
  ) {
    for (const p of pairs) {
      const channel = channels.get(p.channel);
      if (channel) this.byPair.set(pairKey(p.local, p.remote), channel);
    }
    this.cpu = this.byPair.get(pairKey(CPU_DEVICE, CPU_DEVICE));
    for (const [name, channel] of channels) this.info.set(channel, { name, stats: counters.channel(name) });
  }

  /** The channel from `local` here to `remote` there (or, receiving, from `remote` there into `local` here). */
  between(local: Device, remote: Device): Channel | undefined {
    if (local === CPU_DEVICE && remote === CPU_DEVICE) return this.cpu;
    return this.byPair.get(pairKey(local, remote));
  }

  /** Whether some channel takes tensors from `local` here, to a device the peer picks. */
  sendsFrom(local: Device): boolean {
    if (local === CPU_DEVICE && this.cpu) return true;
    return this.pairs.some((p) => sameDevice(p.local, local));
  }

  /** Tensor `i` of `d` that no channel of this pipe can receive, if any. */
  unreceivable(d: Descriptor): number | undefined {
    const tensors = d.tensors;
    for (let i = 0; i < tensors.length; i++) {
      const t = tensors[i]!;
      if (t.sourceDevice === CPU_DEVICE && this.cpu && (!t.targetDevice || t.targetDevice === CPU_DEVICE)) continue;
      const ok = t.targetDevice ? this.between(t.targetDevice, t.sourceDevice) !== undefined : this.pairs.some((p) => sameDevice(p.remote, t.sourceDevice));
      if (!ok) return i;
    }
    return undefined;
  }

  /** The channel's name ("" for none). */
  name(channel: Channel | undefined): string {
    return (channel && this.info.get(channel)?.name) ?? "";
  }

  /** The channel's counters. */
  stats(channel: Channel): ChannelStats {
    return this.info.get(channel)!.stats;
  }

  /** Each pair and its channel, for messages: "cpu:0->cpu:0: basic". */
  describe(): string {
    return describePairs(this.pairs);
  }
}
