/**
 * This checkout against another build of the repository (`--base`, a
 * worktree of an earlier commit, set up and built), in one run: each turn
 * runs build-probe.ts with each build, in A B then B A order, and a pair's
 * ratio is the median of its turn-by-turn ratios, since what the machine
 * gives drifts from turn to turn far more than two builds differ within
 * one. Printed: the 8 B round trip's p50 and the 64 MiB stream's GB/s of
 * each build, and this one's over the base's, with the spread of the turns.
 *
 *   git worktree add /tmp/base <commit> && (cd /tmp/base && pnpm install --offline && pnpm build)
 *   node packages/bench/dist/scripts/compare-builds.js --base /tmp/base [--turns 6] [--pairs shm+cma,uv+basic]
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { fmt, median } from "../stats.js";
import type { ProbeResult } from "./build-probe.js";
import { type Column, printResults, scriptArgs } from "./script.js";

const run = promisify(execFile);
const PROBE = fileURLToPath(new URL("build-probe.js", import.meta.url));
const THIS = fileURLToPath(new URL("../../../../", import.meta.url));

async function probe(root: string, pairs: string): Promise<ProbeResult[]> {
  const { stdout } = await run(process.execPath, [PROBE, "--root", root, "--pairs", pairs], { maxBuffer: 1 << 20 });
  return JSON.parse(stdout) as ProbeResult[];
}

interface Row {
  pair: string;
  base: ProbeResult[];
  now: ProbeResult[];
}

const spread = (ratios: number[]) => `${fmt(Math.min(...ratios), 2)}-${fmt(Math.max(...ratios), 2)}`;

const args = scriptArgs(import.meta.url);
if (args) {
  const base = args.value("--base", "");
  if (!base) throw new Error("usage: compare-builds.js --base DIR [--turns N] [--pairs a+b,...]");
  const turns = Number(args.value("--turns", "6"));
  const pairs = args.value("--pairs", "shm+cma,shm+basic,shm+mpt,uv+cma,uv+basic,uv+mpt");
  const rows = new Map<string, Row>();
  for (let turn = 0; turn < turns; turn++) {
    const order = turn % 2 === 0 ? (["base", "now"] as const) : (["now", "base"] as const);
    for (const which of order) {
      for (const r of await probe(which === "base" ? base : THIS, pairs)) {
        const row = rows.get(r.pair) ?? { pair: r.pair, base: [], now: [] };
        row[which].push(r);
        rows.set(r.pair, row);
      }
    }
    process.stderr.write(`turn ${turn + 1} of ${turns} done\n`);
  }
  const roundTrips = (row: Row) => row.now.map((r, i) => r.roundTripUs / row.base[i]!.roundTripUs);
  const streams = (row: Row) => row.now.map((r, i) => r.gbps / row.base[i]!.gbps);
  const columns: Column<Row>[] = [
    { header: "pair", width: 10, cell: (r) => r.pair, left: true },
    { header: "8 B p50 base us", width: 16, cell: (r) => fmt(median(r.base.map((x) => x.roundTripUs)), 2) },
    { header: "now us", width: 8, cell: (r) => fmt(median(r.now.map((x) => x.roundTripUs)), 2) },
    { header: "now/base", width: 9, cell: (r) => fmt(median(roundTrips(r)), 2) },
    { header: "turns", width: 10, cell: (r) => spread(roundTrips(r)) },
    { header: "64 MiB base GB/s", width: 17, cell: (r) => fmt(median(r.base.map((x) => x.gbps)), 2) },
    { header: "now GB/s", width: 9, cell: (r) => fmt(median(r.now.map((x) => x.gbps)), 2) },
    { header: "now/base", width: 9, cell: (r) => fmt(median(streams(r)), 2) },
    { header: "turns", width: 10, cell: (r) => spread(streams(r)) },
  ];
  printResults(args, `this checkout against ${base}, ${turns} turns (round trip: below 1 is faster; stream: above 1 is faster)`, [...rows.values()], columns);
}
