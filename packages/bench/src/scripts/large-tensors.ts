/**
 * Large tensors between two processes as a user's loop moves them: one
 * Float32Array written again and again over the pair negotiation picks
 * (shm+cma here) to the bench's peer, each message awaited until the peer
 * has it in its memory (its "sink": two buffers it reuses in turn), timed
 * one by one. The first message pays for what is cold (the peer's fresh
 * buffers, pages not yet huge), the rest show the steady state.
 *
 *   node packages/bench/dist/scripts/large-tensors.js [--size 256M] [--count 50] [--runs 1] [--json]
 */
import { CPU_DEVICE } from "@tensorpipe/core";
import { createContext, fmt, parseSize, percentile, sizeLabel, spawnPeer } from "../index.js";
import { printResults, scriptArgs } from "./script.js";

/** One run: every message's time, and what they say. */
export interface LargeTensorRun {
  /** The pair negotiation picked. */
  pair: string;
  /** Bytes per message. */
  size: number;
  /** Each message, in milliseconds, in order. */
  ms: number[];
  /** The first message. */
  firstMs: number;
  /** The steady state: the messages after the peer's two buffers were first used. */
  p50Ms: number;
  p99Ms: number;
  /** The first message over the steady p50 (target <= 3). */
  firstOverP50: number;
  /** The steady p99 over its p50 (target <= 1.5). */
  p99OverP50: number;
}

/** `count` messages of `size` bytes to a fresh peer process. */
export async function largeTensors(size: number, count: number): Promise<LargeTensorRun> {
  const peer = await spawnPeer();
  const context = await createContext();
  try {
    const pipe = await context.connect(peer.urls.find((u) => u.startsWith("shm://")) ?? peer.url);
    const pair = `${pipe.transport}+${pipe.channelFor(CPU_DEVICE, CPU_DEVICE)}`;
    // Written before the clock starts: its pages are the sender's own business.
    const data = new Float32Array(size / 4).fill(1.5);
    const ack = { payloads: [], tensors: [] };
    const ms: number[] = [];
    for (let i = 0; i < count; i++) {
      const t0 = performance.now();
      await Promise.all([pipe.write({ metadata: "sink", tensors: [{ buffer: data }] }), pipe.readDescriptor().then(() => pipe.read(ack))]);
      ms.push(performance.now() - t0);
    }
    const steady = ms.slice(2).sort((a, b) => a - b);
    const p50Ms = percentile(steady, 50);
    const p99Ms = percentile(steady, 99);
    return { pair, size, ms, firstMs: ms[0]!, p50Ms, p99Ms, firstOverP50: ms[0]! / p50Ms, p99OverP50: p99Ms / p50Ms };
  } finally {
    await context.close();
    await peer.stop();
  }
}

const args = scriptArgs(import.meta.url);
if (args) {
  const size = parseSize(args.value("--size", "256M"));
  const count = Number(args.value("--count", "50"));
  const runs: LargeTensorRun[] = [];
  for (let r = 0; r < Number(args.value("--runs", "1")); r++) runs.push(await largeTensors(size, count));
  printResults(args, `${count} messages of ${sizeLabel(size)} between two processes, one at a time (milliseconds; steady: from the third on)`, runs, [
    { header: "pair", width: 10, left: true, cell: (r) => r.pair },
    { header: "first", width: 9, cell: (r) => fmt(r.firstMs) },
    { header: "second", width: 9, cell: (r) => fmt(r.ms[1] ?? NaN) },
    { header: "p50", width: 9, cell: (r) => fmt(r.p50Ms) },
    { header: "p99", width: 9, cell: (r) => fmt(r.p99Ms) },
    { header: "first/p50 (<= 3)", width: 18, cell: (r) => fmt(r.firstOverP50, 2) },
    { header: "p99/p50 (<= 1.5)", width: 18, cell: (r) => fmt(r.p99OverP50, 2) },
  ]);
}
