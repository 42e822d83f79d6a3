/**
 * The first messages of a process against its warm ones. For each
 * transport x channel pair and size, a fresh peer process and a fresh
 * client process: the client's first `--cold` README round trips (write,
 * then readDescriptor() and read()) against a series of `--warm` in the
 * same process once `--skip` more have run, each series' p50 and p99, and
 * their ratios.
 *
 * With `--warm-up N`, each pair and size runs twice, alternately: as
 * above, and with both processes warmed up first (Context.warmUp() with N
 * round trips, `tensorpipe peer --warm-up`), the series started once it
 * has finished.
 *
 *   node packages/bench/dist/scripts/cold-start.js [--pairs uv+basic,uv+mpt,uv+cma,shm+basic,shm+cma]
 *        [--sizes 8,1M] [--cold 1000] [--skip 10000] [--warm 5000] [--warm-up N] [--json]
 */
import { fork } from "node:child_process";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { createContext, percentile, readmeRoundTrips, spawnPeer } from "../index.js";
import { parseSize, sizeLabel } from "../sizes.js";
import { type Column, printResults, scriptArgs } from "./script.js";

const SELF = fileURLToPath(import.meta.url);

interface Job {
  url: string;
  transport: string;
  channel: string;
  bytes: number;
  cold: number;
  skip: number;
  warm: number;
  /** Context.warmUp()'s round trips in both processes first; 0 for none. */
  warmUp: number;
}

interface ColdResult {
  pair: string;
  /** "none", or the round trips each process warmed up with. */
  warmUp: string;
  /** Context.warmUp()'s time in the client, ms. */
  warmUpMs?: number;
  size: string;
  coldP50: number;
  coldP99: number;
  warmP50: number;
  warmP99: number;
}

/** In the client process: the series, as one JSON line. */
async function client(job: Job): Promise<void> {
  const context = await createContext({ transports: [job.transport], channels: [job.channel] });
  try {
    const warmUpMs = job.warmUp > 0 ? (await context.warmUp({ roundTrips: job.warmUp })).ms : undefined;
    const pipe = await context.connect(job.url);
    const data = new Uint8Array(job.bytes).fill(1);
    const back = new Uint8Array(job.bytes);
    const cold = (await readmeRoundTrips(pipe, data, back, job.cold)).sort((a, b) => a - b);
    await readmeRoundTrips(pipe, data, back, job.skip);
    const warm = (await readmeRoundTrips(pipe, data, back, job.warm)).sort((a, b) => a - b);
    process.send!({
      warmUpMs,
      coldP50: percentile(cold, 50),
      coldP99: percentile(cold, 99),
      warmP50: percentile(warm, 50),
      warmP99: percentile(warm, 99),
    });
  } finally {
    await context.close();
  }
}

async function measure(pair: string, bytes: number, counts: { cold: number; skip: number; warm: number; warmUp: number }): Promise<ColdResult> {
  const [transport, channel] = pair.split("+") as [string, string];
  const peer = await spawnPeer("127.0.0.1", [
    "--transports",
    transport,
    "--channels",
    channel,
    ...(counts.warmUp > 0 ? ["--warm-up", String(counts.warmUp)] : []),
  ]);
  try {
    const url = peer.urls.find((u) => u.startsWith(`${transport}://`))!;
    const job: Job = { url, transport, channel, bytes, ...counts };
    const child = fork(SELF, ["--client", JSON.stringify(job)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
    const [figures] = (await once(child, "message")) as [Omit<ColdResult, "pair" | "size" | "warmUp">];
    await once(child, "exit");
    return { pair, size: sizeLabel(bytes), warmUp: counts.warmUp > 0 ? String(counts.warmUp) : "none", ...figures };
  } finally {
    await peer.stop();
  }
}

async function main(): Promise<void> {
  const args = scriptArgs(import.meta.url)!;
  const pairs = args.value("--pairs", "uv+basic,uv+mpt,uv+cma,shm+basic,shm+cma").split(",");
  const sizes = args.value("--sizes", "8,1M").split(",").map(parseSize);
  const counts = { cold: Number(args.value("--cold", "1000")), skip: Number(args.value("--skip", "10000")), warm: Number(args.value("--warm", "5000")) };
  const warmUps = [0, ...(args.has("--warm-up") ? [Number(args.value("--warm-up", "2000"))] : [])];
  const results: ColdResult[] = [];
  for (const bytes of sizes) {
    // A megabyte's round trips take a hundred times longer: fewer of them warm the path as well.
    const n = bytes >= 1 << 20 ? { ...counts, skip: Math.ceil(counts.skip / 5), warm: Math.ceil(counts.warm / 2.5) } : counts;
    for (const pair of pairs) for (const warmUp of warmUps) results.push(await measure(pair, bytes, { ...n, warmUp }));
  }
  const us = (v: number) => v.toFixed(1);
  const columns: Column<ColdResult>[] = [
    { header: "pair", width: 11, cell: (r) => r.pair, left: true },
    { header: "size", width: 7, cell: (r) => r.size },
    { header: "warm-up", width: 8, cell: (r) => r.warmUp },
    { header: "ms", width: 6, cell: (r) => (r.warmUpMs === undefined ? "" : r.warmUpMs.toFixed(0)) },
    { header: "cold p50 us", width: 12, cell: (r) => us(r.coldP50) },
    { header: "warm p50 us", width: 12, cell: (r) => us(r.warmP50) },
    { header: "x", width: 6, cell: (r) => (r.coldP50 / r.warmP50).toFixed(2) },
    { header: "cold p99 us", width: 12, cell: (r) => us(r.coldP99) },
    { header: "warm p99 us", width: 12, cell: (r) => us(r.warmP99) },
    { header: "x", width: 6, cell: (r) => (r.coldP99 / r.warmP99).toFixed(2) },
  ];
  printResults(
    args,
    `cold start: the first ${counts.cold} round trips of a fresh process against ${counts.warm} after ${counts.skip} more (1 MiB: a fifth and two fifths as many)`,
    results,
    columns,
  );
}

const at = process.argv.indexOf("--client");
if (at >= 0) await client(JSON.parse(process.argv[at + 1]!) as Job);
else await main();
