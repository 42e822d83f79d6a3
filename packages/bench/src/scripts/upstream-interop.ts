/**
 * Node to C++ at the speed of the machine: round trips of one tensor of
 * 8 B and of 64 MiB between a Node process and upstream C++ TensorPipe
 * (upstream_peer), over each pair of backends the two agree on, beside
 * C++ to C++ and Node to Node over the same pair, in one run. Each client
 * times round trips to an echoing peer: the p50 round trip, and the
 * throughput both ways over the timed round trips.
 *
 *   node packages/bench/dist/scripts/upstream-interop.js [--rounds 2000] [--large-rounds 20] [--json]
 */
import type { Pipe } from "@tensorpipe/core";
import { createContext, fmt, readmeRoundTrips, spawnPeer, summarize, upstreamListener, upstreamPeerMissing, upstreamRoundTrips } from "../index.js";
import { printResults, scriptArgs } from "./script.js";

const MiB = 1024 * 1024;

/** The pairs Node and upstream both speak (docs/wire-protocol.md; shm and mpt do not interoperate). */
const PAIRS = [
  { transport: "uv", channel: "basic" },
  { transport: "uv", channel: "cma" },
];

export interface InteropRow {
  pair: string;
  /** "node -> c++", "c++ -> c++" or "node -> node": the client, then the echoing peer. */
  between: string;
  bytes: number;
  p50Us: number;
  /** Both ways over the timed round trips, GB/s. */
  gbps: number;
}

/** `rounds` round trips of one `bytes` tensor from `pipe`, as the README writes them (after as many untimed), as upstream_peer's bench times them. */
async function nodeRoundTrips(pipe: Pipe, bytes: number, rounds: number): Promise<{ p50Us: number; seconds: number }> {
  const data = new Uint8Array(bytes).fill(7);
  const landing = new Uint8Array(bytes);
  await readmeRoundTrips(pipe, data, landing, rounds);
  const start = performance.now();
  const samples = await readmeRoundTrips(pipe, data, landing, rounds);
  return { p50Us: summarize(samples).p50, seconds: (performance.now() - start) / 1000 };
}

export async function upstreamInterop(rounds: number, largeRounds: number): Promise<InteropRow[]> {
  const rows: InteropRow[] = [];
  for (const { transport, channel } of PAIRS) {
    const pair = `${transport} + ${channel}`;
    const cpp = await upstreamListener(transport, channel);
    const node = await spawnPeer();
    const context = await createContext({ transports: [transport], channels: [channel] });
    try {
      const cppUrl = cpp.info.urls[0]!;
      const toCpp = await context.connect(cppUrl);
      const toNode = await context.connect(node.urls.find((u) => u.startsWith(`${transport}://`))!);
      for (const [bytes, n] of [
        [8, rounds],
        [64 * MiB, largeRounds],
      ] as const) {
        const row = (between: string, r: { p50Us: number; seconds: number }) =>
          rows.push({ pair, between, bytes, p50Us: r.p50Us, gbps: (2 * bytes * n) / r.seconds / 1e9 });
        row("node -> c++", await nodeRoundTrips(toCpp, bytes, n));
        row("c++ -> c++", await upstreamRoundTrips(transport, channel, cppUrl, bytes, n));
        row("node -> node", await nodeRoundTrips(toNode, bytes, n));
      }
    } finally {
      await context.close();
      await node.stop();
      await cpp.stop();
    }
  }
  return rows;
}

const args = scriptArgs(import.meta.url);
if (args) {
  const missing = upstreamPeerMissing();
  if (missing) {
    console.error(missing);
    process.exit(1);
  }
  const rows = await upstreamInterop(Number(args.value("--rounds", "2000")), Number(args.value("--large-rounds", "20")));
  printResults(args, "Round trips of one tensor to an echoing peer, the client first", rows, [
    { header: "pair", width: 14, left: true, cell: (r) => r.pair },
    { header: "between", width: 15, left: true, cell: (r) => r.between },
    { header: "bytes", width: 10, cell: (r) => String(r.bytes) },
    { header: "p50 us", width: 11, cell: (r) => fmt(r.p50Us, 1) },
    { header: "GB/s", width: 9, cell: (r) => fmt(r.gbps, 3) },
  ]);
  if (!args.has("--json")) {
    console.log("\nratios (this run):");
    for (const { transport, channel } of PAIRS) {
      const pair = `${transport} + ${channel}`;
      for (const bytes of [8, 64 * MiB]) {
        const at = (between: string) => rows.find((r) => r.pair === pair && r.between === between && r.bytes === bytes)!;
        const [n2c, c2c, n2n] = [at("node -> c++"), at("c++ -> c++"), at("node -> node")];
        const what = bytes === 8 ? "8 B round trip" : "64 MiB GB/s";
        const ratio = (a: InteropRow, b: InteropRow) => (bytes === 8 ? b.p50Us / a.p50Us : a.gbps / b.gbps);
        console.log(`  ${pair}, ${what}: node -> c++ is ${fmt(ratio(n2c, c2c), 2)}x c++ -> c++, ${fmt(ratio(n2c, n2n), 2)}x node -> node (higher is faster)`);
      }
    }
  }
}
