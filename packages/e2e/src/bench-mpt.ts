/**
 * mpt against basic, 16 MiB and 64 MiB tensors one way, on loopback and
 * (as root) across a veth link between network namespaces, with 1% loss
 * where nftables is there. Ratios measured in this run.
 *
 *   node packages/e2e/dist/bench-mpt.js [--lanes N] [--rounds N]
 */
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { Pipe } from "@tensorpipe/core";
import { createContext, sinkThroughput, spawnPeer, fmt, median } from "@tensorpipe/cli";
import { TestNetwork } from "./test-network.js";

const args = process.argv.slice(2);
const lanes = args.includes("--lanes") ? Number(args[args.indexOf("--lanes") + 1]) : 4;
const rounds = args.includes("--rounds") ? Number(args[args.indexOf("--rounds") + 1]) : 3;
const SIZES = [16 << 20, 64 << 20];

function report(where: string, results: Record<string, Record<number, number[]>>): void {
  for (const size of SIZES) {
    const b = median(results.basic![size]!);
    const m = median(results.mpt![size]!);
    console.log(`  ${where.padEnd(22)} ${String(size >> 20).padStart(3)} MiB  basic ${fmt(b, 2)} GB/s  mpt ${fmt(m, 2)} GB/s  mpt/basic ${fmt(m / b, 2)}x (target >= 1.2)`);
  }
}

console.log(`mpt with ${lanes} lanes against basic, medians of ${rounds} rounds`);
{
  const peer = await spawnPeer("127.0.0.1", ["--transports", "uv", "--lanes", String(lanes)]);
  const results: Record<string, Record<number, number[]>> = { basic: {}, mpt: {} };
  const pipes: [string, Pipe, () => Promise<void>][] = [];
  for (const channel of ["basic", "mpt"]) {
    const ctx = await createContext({ transports: ["uv"], channels: [channel], lanes });
    pipes.push([channel, await ctx.connect(peer.url), () => ctx.close()]);
  }
  for (const size of SIZES) {
    const tensor = new Uint8Array(size).fill(1);
    for (const [, pipe] of pipes) await sinkThroughput(pipe, tensor, 2);
    for (let r = 0; r < rounds; r++) {
      for (const [channel, pipe] of pipes) (results[channel]![size] ??= []).push(await sinkThroughput(pipe, tensor, (256 << 20) / size));
    }
  }
  report("loopback", results);
  for (const [, , close] of pipes) await close();
  await peer.stop();
}

const why = TestNetwork.unavailable();
if (why) {
  console.log(`  veth: skipped (${why})`);
} else {
  const net = TestNetwork.create(2, { lossPercent: 1, delayMs: 1 });
  try {
    const peer = await spawnPeer(net.host("a").address, ["--transports", "uv", "--lanes", String(lanes)], { netns: net.host("a").namespace });
    const client = fileURLToPath(new URL("./remote-client.js", import.meta.url));
    const results: Record<string, Record<number, number[]>> = { basic: {}, mpt: {} };
    for (let r = 0; r < rounds; r++) {
      for (const channel of ["basic", "mpt"]) {
        const job = { url: peer.url, transports: ["uv"], channels: [channel], lanes, scenario: "throughput", sizes: SIZES, count: 4 };
        const child = net.spawn("b", process.execPath, [client, JSON.stringify(job)]);
        for await (const line of createInterface({ input: child.stdout! })) {
          const o = JSON.parse(line) as { size?: number; gbps?: number };
          if (o.size) (results[channel]![o.size] ??= []).push(o.gbps!);
        }
      }
    }
    report(`veth (${net.applied.join(", ") || "clean"})`, results);
    await peer.stop();
  } finally {
    net.destroy();
  }
}
