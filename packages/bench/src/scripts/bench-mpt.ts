/**
 * mpt against basic, 16 MiB and 64 MiB tensors one way into a peer
 * process, on loopback and (as root) across a veth link between network
 * namespaces, clean and with 1% loss each way where nftables is there.
 * Rounds alternate between the two channels; ratios are of the medians
 * measured in this run.
 *
 *   node packages/bench/dist/scripts/bench-mpt.js [--lanes N] [--rounds N] [--json]
 */
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { fmt, median, spawnPeer } from "../index.js";
import { type ChannelComparison, compareChannels } from "./compare-channels.js";
import { TestNetwork } from "../test-network.js";

const args = process.argv.slice(2);
const option = (name: string, fallback: number) => (args.includes(name) ? Number(args[args.indexOf(name) + 1]) : fallback);
const lanes = option("--lanes", 4);
const rounds = option("--rounds", 5);
const json = args.includes("--json");
const SIZES = [16 << 20, 64 << 20];
const CHANNELS = ["basic", "mpt"];
const results: { link: string; size: number; basic: number; mpt: number; ratio: number; mptRounds: number[]; basicRounds: number[] }[] = [];

function report(link: string, { gbps }: ChannelComparison): void {
  for (const size of SIZES) {
    const basic = median(gbps.basic![size]!);
    const mpt = median(gbps.mpt![size]!);
    results.push({ link, size, basic, mpt, ratio: mpt / basic, basicRounds: gbps.basic![size]!, mptRounds: gbps.mpt![size]! });
    if (json) continue;
    const spread = (v: number[]) => `${fmt(Math.min(...v), 2)}-${fmt(Math.max(...v), 2)}`;
    console.log(
      `  ${link.padEnd(26)} ${String(size >> 20).padStart(3)} MiB  basic ${fmt(basic, 2)} GB/s (${spread(gbps.basic![size]!)})` +
        `  mpt ${fmt(mpt, 2)} GB/s (${spread(gbps.mpt![size]!)})  mpt/basic ${fmt(mpt / basic, 2)}x (target >= 1.2)`,
    );
  }
}

/** Runs the comparison from another test host, where the client must run. */
async function compareFrom(net: TestNetwork, host: string, url: string): Promise<ChannelComparison> {
  const client = fileURLToPath(new URL("../../dist/scripts/remote-client.js", import.meta.url));
  const job = { url, scenario: "compare", channels: CHANNELS, lanes, sizes: SIZES, rounds };
  const child = net.spawn(host, process.execPath, [client, JSON.stringify(job)]);
  for await (const line of createInterface({ input: child.stdout! })) {
    const o = JSON.parse(line) as { gbps?: ChannelComparison["gbps"]; error?: string; message?: string };
    if (o.gbps) return { gbps: o.gbps };
    if (o.error) throw new Error(`remote client: ${o.error} ${o.message}`);
  }
  throw new Error("remote client printed no result");
}

if (!json) console.log(`mpt with ${lanes} lanes against basic over uv, medians of ${rounds} rounds (min-max), 256 MiB a round`);
{
  const peer = await spawnPeer("127.0.0.1", ["--transports", "uv", "--lanes", String(lanes)]);
  try {
    report("loopback", await compareChannels(peer.url, CHANNELS, { lanes, sizes: SIZES, rounds }));
  } finally {
    await peer.stop();
  }
}

const why = TestNetwork.unavailable();
if (why) {
  if (!json) console.log(`  veth: skipped (${why})`);
} else {
  for (const shape of [{}, { lossPercent: 1 }]) {
    const net = TestNetwork.create(2, shape);
    try {
      const a = net.host("a");
      const peer = await spawnPeer(a.address, ["--transports", "uv", "--lanes", String(lanes)], { netns: a.namespace });
      try {
        report(`veth (${net.applied.join(", ") || "clean"})`, await compareFrom(net, "b", peer.url));
      } finally {
        await peer.stop();
      }
    } finally {
      net.destroy();
    }
  }
}
if (json) console.log(JSON.stringify({ lanes, rounds, results }));
