/**
 * What a run's figures say: the ratios of each pair to each baseline
 * measured in the run, the project's targets judged against them (with
 * --targets), the table, and the plot.
 */
import { C_SERIES } from "./c-baseline.js";
import type { BenchResult, SeriesResult } from "./result.js";
import { README_LOOP } from "./series.js";
import { sizeLabel } from "./sizes.js";
import { fmt, pairedRatio } from "./stats.js";
import { svgLinePlot } from "./svg-plot.js";

/** Each pipe against each baseline at the largest size (GB/s) and the smallest (round trip p50). */
export function ratiosOf(series: readonly SeriesResult[], sizes: readonly number[], headToHead: BenchResult["headToHead"]): Record<string, number> {
  const ratios: Record<string, number> = {};
  const big = sizes[sizes.length - 1]!;
  const small = sizes[0]!;
  for (const p of series.filter((s) => s.kind === "pipe")) {
    for (const b of series.filter((s) => s.kind === "baseline")) {
      ratios[`${p.name} ${sizeLabel(big)} GB/s / ${b.name}`] = pairedRatio(p.cells[big]!.turnsGbps, b.cells[big]!.turnsGbps);
      const bp50 = b.cells[small]!.p50;
      if (bp50 !== undefined) ratios[`${p.name} ${sizeLabel(small)} RTT p50 / ${b.name}`] = p.cells[small]!.p50! / bp50;
    }
  }
  // The kernel's part of cma's gap to memcpy; shm+cma / cma (C) above is the library's.
  const cmaC = series.find((s) => s.name === C_SERIES.cma);
  const memcpy = series.find((s) => s.name === "memcpy");
  if (cmaC && memcpy) ratios[`${C_SERIES.cma} ${sizeLabel(big)} GB/s / memcpy`] = pairedRatio(cmaC.cells[big]!.turnsGbps, memcpy.cells[big]!.turnsGbps);
  // The README's loop against the tuned loop over the same pair, the
  // baselines, and its own tail; and the pair it runs over (the one
  // negotiation picks) against the best pair at every size.
  for (const u of series.filter((s) => s.kind === "user-code")) {
    const p50 = u.cells[small]!.p50!;
    const tuned = series.find((s) => s.name === u.over);
    if (tuned) ratios[`${u.name} ${sizeLabel(small)} RTT p50 / tuned loop`] = p50 / tuned.cells[small]!.p50!;
    for (const b of series.filter((s) => s.kind === "baseline")) {
      const bp50 = b.cells[small]!.p50;
      if (bp50 !== undefined) ratios[`${u.name} ${sizeLabel(small)} RTT p50 / ${b.name}`] = p50 / bp50;
    }
    ratios[`${u.name} ${sizeLabel(small)} RTT p99 / its p50`] = u.cells[small]!.p99! / p50;
    if (!tuned) continue;
    // Head to head with the pair furthest ahead; the best pair may be itself (1).
    for (const size of sizes) {
      const h = headToHead[size];
      if (h) ratios[`${DEFAULT_PAIR} ${sizeLabel(size)} GB/s / best pair`] = h.own.length ? Math.min(1, pairedRatio(h.own, h.other)) : 1;
    }
  }
  return ratios;
}

/** Names the pair negotiation picks by default in the ratios. */
export const DEFAULT_PAIR = "default pair";

// The project's stated goals, shown beside the ratios they judge.
function targets(sizes: readonly number[]): Record<string, string> {
  const t: Record<string, string> = {
    [`uv+basic 64 MiB GB/s / ${C_SERIES.tcp}`]: ">= 0.95",
    "uv+basic 64 MiB GB/s / node:net": ">= 1.3",
    "uv+basic 8 B RTT p50 / node:net": "<= 1.0",
    "shm+cma 64 MiB GB/s / memcpy": ">= 0.9",
    [`shm+cma 64 MiB GB/s / ${C_SERIES.cma}`]: ">= 0.95",
    [`${README_LOOP} 8 B RTT p50 / tuned loop`]: "<= 1.2",
    [`${README_LOOP} 8 B RTT p50 / ${C_SERIES.shmRing}`]: "<= 4",
    [`${README_LOOP} 8 B RTT p99 / its p50`]: "<= 4",
  };
  for (const size of sizes) t[`${DEFAULT_PAIR} ${sizeLabel(size)} GB/s / best pair`] = ">= 0.9";
  return t;
}

/** Whether `ratio` meets a target written ">= x" or "<= x". */
function meets(ratio: number, target: string): boolean {
  const bound = Number(target.slice(2));
  return target.startsWith(">=") ? ratio >= bound : ratio <= bound;
}

export function report(result: BenchResult, print: (line: string) => void, showTargets: boolean): void {
  const width = Math.max(10, ...result.series.map((s) => s.name.length)) + 2;
  print(`\n${"size".padEnd(9)}${"series".padEnd(width)}${"p50 us".padStart(10)}${"p99 us".padStart(10)}${"GB/s".padStart(9)}${"mean".padStart(9)}`);
  for (const size of result.sizes) {
    result.series.forEach((s, i) => {
      const c = s.cells[size]!;
      const lat = c.p50 === undefined ? ["", ""] : [fmt(c.p50), fmt(c.p99!)];
      print(
        `${(i === 0 ? sizeLabel(size) : "").padEnd(9)}${s.name.padEnd(width)}${lat[0]!.padStart(10)}${lat[1]!.padStart(10)}${fmt(c.gbps, 3).padStart(9)}${fmt(c.meanGbps, 3).padStart(9)}`,
      );
    });
  }
  print("GB/s: the median of every turn; mean: all turns' bytes over their time, the machine's slow spells included");
  print(
    `\nratios measured in this run: GB/s at ${sizeLabel(result.sizes.at(-1)!)} (higher is better; the median of the ratios turn by turn), round trip p50 at ${sizeLabel(result.sizes[0]!)} (lower is better)`,
  );
  const baselines = result.series.filter((s) => s.kind === "baseline");
  for (const p of result.series.filter((s) => s.kind === "pipe")) {
    const against = (what: string) =>
      baselines
        .filter((b) => result.ratios[`${p.name} ${what} / ${b.name}`] !== undefined)
        .map((b) => `${fmt(result.ratios[`${p.name} ${what} / ${b.name}`]!, 2)}x ${b.name}`)
        .join(", ");
    print(`  ${p.name.padEnd(12)} GB/s ${against(`${sizeLabel(result.sizes.at(-1)!)} GB/s`)}; RTT ${against(`${sizeLabel(result.sizes[0]!)} RTT p50`)}`);
  }
  const kernel = result.ratios[`${C_SERIES.cma} ${sizeLabel(result.sizes.at(-1)!)} GB/s / memcpy`];
  if (kernel !== undefined)
    print(`  ${C_SERIES.cma.padEnd(12)} GB/s ${fmt(kernel, 2)}x memcpy (cma's copy without Node: the kernel's part of cma's gap to memcpy)`);
  if (!showTargets) return;
  const judged = Object.entries(targets(result.sizes)).filter(([k]) => result.ratios[k] !== undefined);
  if (judged.length) print(`project targets (${DEFAULT_PAIR}: ${result.series.find((s) => s.kind === "user-code")?.over ?? "none"})`);
  // Which pair the default was held against at each size.
  const heldAgainst: Record<string, string> = {};
  for (const size of result.sizes) {
    const h = result.headToHead[size];
    if (h) heldAgainst[`${DEFAULT_PAIR} ${sizeLabel(size)} GB/s / best pair`] = h.own.length ? `, head to head with ${h.against}` : ", no pair ahead of it";
  }
  for (const [k, target] of judged) {
    const ratio = result.ratios[k]!;
    print(`  ${k.padEnd(40)} ${fmt(ratio, 2).padStart(6)}x (target ${target}: ${meets(ratio, target) ? "met" : "NOT met"})${heldAgainst[k] ?? ""}`);
  }
}

export function plot(result: BenchResult): string {
  return svgLinePlot(
    result.series.map((s) => ({ name: s.name, points: result.sizes.map((x) => ({ x, y: s.cells[x]!.gbps })) })),
    {
      title: "tensorpipe-js: one-way throughput between two processes",
      xLabel: "tensor size",
      yLabel: "GB/s (median, log scale)",
      xTick: sizeLabel,
      yLog: true,
    },
  );
}
