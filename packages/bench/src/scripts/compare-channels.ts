import type { Pipe } from "@tensorpipe/core";
import { createContext, sinkThroughput } from "../index.js";

export interface ChannelComparison {
  /** GB/s of each round, by channel, then by size. */
  gbps: Record<string, Record<number, number[]>>;
}

/**
 * One-way GB/s of each channel into the peer at `url`, each over its own
 * pipe, rounds alternating between the channels so that both see the same
 * machine; each round moves 256 MiB per channel and size.
 */
export async function compareChannels(
  url: string,
  channels: readonly string[],
  options: { lanes: number; sizes: readonly number[]; rounds: number },
): Promise<ChannelComparison> {
  const pipes: [string, Pipe, () => Promise<void>][] = [];
  try {
    for (const channel of channels) {
      const ctx = await createContext({ transports: ["uv"], channels: [channel], lanes: options.lanes });
      pipes.push([channel, await ctx.connect(url, { timeout: 10_000 }), () => ctx.close()]);
    }
    const gbps: ChannelComparison["gbps"] = Object.fromEntries(channels.map((c) => [c, {}]));
    for (const size of options.sizes) {
      const tensor = new Uint8Array(size).fill(1);
      const count = Math.max(2, (256 << 20) / size);
      for (const [, pipe] of pipes) await sinkThroughput(pipe, tensor, 2);
      for (let r = 0; r < options.rounds; r++) {
        for (const [channel, pipe] of pipes) (gbps[channel]![size] ??= []).push(await sinkThroughput(pipe, tensor, count));
      }
    }
    return { gbps };
  } finally {
    for (const [, , close] of pipes) await close();
  }
}
