/**
 * The project's bench (`pnpm bench`): a peer process (`tensorpipe peer`),
 * every viable transport x channel pair to it, a matrix of tensor sizes,
 * and the baselines measured in the same run in alternating turns
 * (schedule.ts), so that a noisy machine's drift hits every series alike:
 * the machine's limits (memcpy on the best number of threads, C programs
 * doing the backends' exchange without Node) and the peers a user would
 * pick instead (node:net, zeromq.js). The report (report.ts) prints the
 * ratios measured in the run, and with --targets the project's targets.
 */
import { writeFileSync } from "node:fs";
import { findCBaselines } from "./c-baseline.js";
import { type BackendChoice, probeBackends } from "./context.js";
import { ParallelMemcpy } from "./memcpy-baseline.js";
import { ProgressBar, type ProgressStream } from "./progress-bar.js";
import { plot, ratiosOf, report } from "./report.js";
import type { BenchResult, SeriesResult } from "./result.js";
import { measureAll } from "./schedule.js";
import { type Measured, README_LOOP, cBaseline, memcpy, nodeNet, pairSeries, readmeLoop, zeromq } from "./series.js";
import { DEFAULT_SIZES, sizeLabel } from "./sizes.js";
import { spawnPeer } from "./spawn-peer.js";
import { median, summarize } from "./stats.js";

/** What `tensorpipe bench` measures, and where it writes. */
export interface BenchOptions extends BackendChoice {
  /** Message sizes in bytes (default DEFAULT_SIZES). */
  sizes?: readonly number[];
  /** Rounds per cell; medians are reported (default 3, 1 with quick). */
  rounds?: number;
  /** Fewer iterations: a smoke run. */
  quick?: boolean;
  /** Leave zeromq.js out even where it is installed. */
  noZmq?: boolean;
  /** Where to write the plot of GB/s against size. */
  svgPath?: string;
  /** Where to write every figure as JSON. */
  jsonPath?: string;
  /** Where the report goes, a line at a time. */
  print?: (line: string) => void;
  /** Where the progress bar goes (default stderr). */
  progress?: ProgressStream;
  /**
   * Also print the project's own performance targets, each said to be met
   * or not (the repository's `pnpm bench` does); a user's run prints the
   * figures and ratios only.
   */
  targets?: boolean;
}

/** Runs the benchmark against a peer process it spawns, prints the report and returns the figures. */
export async function runBench(options: BenchOptions = {}): Promise<BenchResult> {
  const print = options.print ?? ((line: string) => console.log(line));
  const sizes = [...(options.sizes ?? DEFAULT_SIZES)].sort((a, b) => a - b);
  const rounds = options.rounds ?? (options.quick ? 1 : 3);

  const skipped: BenchResult["skipped"] = [];
  const found = await probeBackends(options);
  const viable = (kind: "transport" | "channel") =>
    found
      .filter((b) => {
        if (b.descriptor.kind !== kind || b.memory === "cuda") return false;
        if (!b.viability.viable) skipped.push({ name: b.descriptor.name, reason: b.viability.reason });
        return b.viability.viable;
      })
      .map((b) => b.descriptor.name);
  const transports = viable("transport");
  const channels = viable("channel");

  const peerArgs = [
    ...(options.lanes ? ["--lanes", String(options.lanes)] : []),
    ...(options.parallelism ? ["--copy-threads", String(options.parallelism)] : []),
    ...(options.backends ?? []).flatMap((b) => ["--backend", b]),
  ];
  const peer = await spawnPeer("127.0.0.1", peerArgs);
  const measured: Measured[] = [];
  try {
    print(`tensorpipe bench: two processes on this machine (peer pid ${peer.pid}), ${rounds} round(s), medians`);
    print(
      `  memcpy: into a reused buffer, the best of 1 to ${ParallelMemcpy.MAX_THREADS} threads from ${sizeLabel(ParallelMemcpy.SPLIT_FROM)} up (one thread below)`,
    );
    print("  C programs: round trips with their two processes pinned to two cores, streams where the scheduler puts them");
    for (const t of transports) {
      for (const c of channels) {
        const name = `${t}+${c}`;
        const url = peer.urls.find((u) => u.startsWith(`${t}://`));
        if (!url) skipped.push({ name, reason: `the peer does not listen on ${t}` });
        else {
          try {
            measured.push(await pairSeries(options, t, c, url));
          } catch (e) {
            skipped.push({ name, reason: (e as Error).message });
          }
        }
      }
    }
    const userCode = await readmeLoop(options, transports, channels, peer);
    if (userCode) {
      print(`  ${README_LOOP}: the README's round trip over what negotiation picks by default (${userCode.pair})`);
      measured.push(userCode.measured);
    }
    measured.push(memcpy());
    const cBaselines = findCBaselines(found);
    measured.push(...cBaselines.found.map(cBaseline));
    skipped.push(...cBaselines.skipped);
    measured.push(await nodeNet(peer));
    if (options.noZmq) skipped.push({ name: "zeromq", reason: "--no-zmq" });
    else {
      const zmq = await zeromq();
      if ("missing" in zmq) skipped.push({ name: "zeromq", reason: zmq.missing });
      else measured.push(zmq);
    }
    for (const s of skipped) print(`  skipped ${s.name}: ${s.reason}`);

    const bar = new ProgressBar(sizes.length * rounds * measured.length, options.progress ?? process.stderr);
    const { samples, headToHead } = await measureAll(measured, { sizes, rounds, quick: options.quick ?? false, defaultPair: userCode?.pair, bar });
    bar.finish();

    const series: SeriesResult[] = measured.map((m) => ({
      name: m.name,
      kind: m.kind,
      ...(m.over ? { over: m.over } : {}),
      cells: Object.fromEntries(
        sizes.map((size) => {
          const acc = samples.get(`${m.name}/${size}`)!;
          const latency = acc.rtt.length ? summarize(acc.rtt) : {};
          // Every turn moves as many bytes, so their mean rate is the harmonic mean.
          const meanGbps = acc.gbps.length / acc.gbps.reduce((seconds, gbps) => seconds + 1 / gbps, 0);
          return [size, { ...latency, gbps: median(acc.gbps), meanGbps, turnsGbps: acc.gbps }];
        }),
      ),
    }));
    const stats: BenchResult["stats"] = {};
    for (const m of measured) if (m.stats) stats[m.name] = m.stats();
    const result: BenchResult = { sizes, rounds, series, skipped, ratios: ratiosOf(series, sizes, headToHead), headToHead, stats };
    report(result, print, options.targets ?? false);
    if (options.svgPath) {
      writeFileSync(options.svgPath, plot(result));
      print(`\nplot of throughput against size: ${options.svgPath}`);
    }
    if (options.jsonPath) writeFileSync(options.jsonPath, `${JSON.stringify(result, null, 2)}\n`);
    return result;
  } finally {
    for (const m of measured) await m.close();
    await peer.stop();
  }
}
