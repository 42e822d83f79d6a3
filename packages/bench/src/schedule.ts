/**
 * The order things are measured in: at each size, every series warmed,
 * then round trips and streams in short turns across the series, each turn
 * in another order drawn from a seed, so that a noisy machine's drift hits
 * every series alike; then the pair negotiation picks streamed head to
 * head with the pair that came out furthest ahead of it.
 */
import type { HeadToHead } from "./result.js";
import type { ProgressBar } from "./progress-bar.js";
import type { Measured } from "./series.js";
import { sizeLabel } from "./sizes.js";
import { median, pairedRatio } from "./stats.js";

const MiB = 1024 * 1024;

/** How much to measure. */
export interface Schedule {
  /** Message sizes in bytes, ascending. */
  sizes: readonly number[];
  /** Rounds per cell. */
  rounds: number;
  /** Fewer iterations: a smoke run. */
  quick: boolean;
  /** The name of the pair negotiation picks, held head to head against the pair furthest ahead of it. */
  defaultPair?: string;
  /** Where progress goes. */
  bar: ProgressBar;
}

/** Every sample of a schedule. */
export interface Samples {
  /** By `${series}/${size}`: round trips in microseconds, and GB/s of each stream turn. */
  samples: Map<string, { rtt: number[]; gbps: number[] }>;
  /** By size. */
  headToHead: Record<number, HeadToHead>;
}

/** Measures every series at every size, in turns. */
export async function measureAll(measured: readonly Measured[], { sizes, rounds, quick, defaultPair, bar }: Schedule): Promise<Samples> {
  // Bytes per throughput block: a block of large tensors lasts 50-500 ms.
  const budget = quick ? 8 * MiB : 1024 * MiB;
  const rttCount = (size: number) => Math.max(3, Math.min(quick ? 100 : 1000, Math.floor(budget / 2 / size)));
  // Small messages are many: enough of them that a block lasts long enough
  // for the machine's noise to average out (10,000 of 4 KiB take ~50 ms).
  const bulkCount = (size: number) => Math.max(2, Math.min(quick ? 2000 : 10_000, Math.floor(budget / size)));
  const samples = new Map<string, { rtt: number[]; gbps: number[] }>();
  const headToHead: Record<number, HeadToHead> = {};
  for (const size of sizes) {
    const data = new Uint8Array(size).fill(1);
    const back = new Uint8Array(size);
    for (const m of measured) {
      // Warm: the JIT, the rings and socket buffers, the pages on both ends
      // (cma turns large buffers into huge pages over its first transfers).
      await warmRoundTrips(m.roundTrips?.bind(m), data, back, quick ? Math.min(200, rttCount(size)) : 20_000);
      for (let i = 0; i < (size >= 16 * MiB ? 2 : 1); i++) await m.throughput(data, Math.min(1000, bulkCount(size)));
    }
    const acc = (m: Measured) => {
      const key = `${m.name}/${size}`;
      let a = samples.get(key);
      if (!a) samples.set(key, (a = { rtt: [], gbps: [] }));
      return a;
    };
    // Round trips go in short turns across the series: how fast a process
    // wakes up depends on what the machine did just before (a C baseline
    // leaves its cores warm), and the turns spread that over every series.
    const turns = rttCount(size) >= 100 ? 10 : 1;
    for (let r = 0; r < rounds; r++) {
      // Each turn in another order: what ran just before a series (the C
      // baselines' processes, memcpy's threads) leaves the machine in a state
      // that favours or slows it, and no series may always follow the same
      // one, not even for the ten turns of a round.
      const orderOf = (turn: number, stream: number) => shuffled(measured, ((size * 31 + r) * 64 + turn) * 2 + stream);
      for (let t = 0; t < turns; t++) {
        for (const m of orderOf(t, 0)) {
          bar.show(`${m.name} ${sizeLabel(size)} round trips (round ${r + 1}/${rounds})`);
          if (!m.roundTrips) continue;
          // The first round trips of a turn wake a pipe that sat idle
          // through the other series' turns, on cores that may have slept:
          // not what a loop sees. After a pause of 5 ms the README loop's
          // 8 B round trips ran slower for over a millisecond (p50 8.6-8.7
          // us over a turn's 100 after 3 untimed, 6.7-7.2 after 300).
          if (turns > 1) await warmRoundTrips(m.roundTrips.bind(m), data, back, TURN_WARM_CAP, TURN_WARM_MS);
          acc(m).rtt.push(...(await m.roundTrips(data, back, Math.ceil(rttCount(size) / turns))));
        }
      }
      // Streams go in turns too, for the same reason: series that take
      // one path (shm+cma and shm+basic below cma's inline size) came out
      // up to 1.4x apart when each ran in one block, and one 64 MiB block
      // of shm+cma ran at 0.65 to 1.0x memcpy's.
      const bulkTurns = bulkCount(size) >= 1000 ? 10 : bulkCount(size) >= 12 ? 3 : 1;
      for (let t = 0; t < bulkTurns; t++) {
        for (const m of orderOf(t, 1)) {
          bar.show(`${m.name} ${sizeLabel(size)} (round ${r + 1}/${rounds})`);
          acc(m).gbps.push(await m.throughput(data, Math.ceil(bulkCount(size) / bulkTurns)));
        }
      }
      for (const m of measured) bar.tick(`${m.name} ${sizeLabel(size)}`);
    }
    const own = measured.find((m) => m.kind === "pipe" && m.name === defaultPair);
    if (own) {
      const gbpsOf = (m: Measured) => samples.get(`${m.name}/${size}`)!.gbps;
      const others = measured.filter((m) => m.kind === "pipe" && m !== own);
      const ahead = others.map((m) => ({ m, ratio: pairedRatio(gbpsOf(own), gbpsOf(m)) })).sort((a, b) => a.ratio - b.ratio)[0];
      if (!ahead || ahead.ratio >= 1) headToHead[size] = { against: own.name, own: [], other: [] };
      else {
        bar.show(`${own.name} against ${ahead.m.name} ${sizeLabel(size)}, head to head`);
        headToHead[size] = await streamHeadToHead(own, ahead.m, data, median(gbpsOf(own)), quick ? 2 : undefined);
      }
    }
  }
  bar.finish();
  return { samples, headToHead };
}

/**
 * `own` and `other` streamed in alternating blocks of about a millisecond
 * (two messages at least: a block double-buffers as a stream does), A B B
 * A, for about HEAD_TO_HEAD_MS in all (`quads` A B B A rounds when told).
 */
async function streamHeadToHead(own: Measured, other: Measured, data: Uint8Array, ownGbps: number, quads?: number): Promise<HeadToHead> {
  const size = data.length;
  const count = Math.max(2, Math.min(10_000, Math.round((ownGbps * 1e9 * BLOCK_MS) / 1000 / size)));
  const blockMs = (count * size) / (ownGbps * 1e6);
  const rounds = quads ?? Math.max(10, Math.min(80, Math.floor(HEAD_TO_HEAD_MS / (4 * blockMs))));
  const h: HeadToHead = { against: other.name, own: [], other: [] };
  for (let q = 0; q < rounds; q++) {
    h.own.push(await own.throughput(data, count));
    h.other.push(await other.throughput(data, count));
    h.other.push(await other.throughput(data, count));
    h.own.push(await own.throughput(data, count));
  }
  return h;
}

/** A head-to-head block's length, and the whole head to head's. */
const BLOCK_MS = 1;
const HEAD_TO_HEAD_MS = 1000;

/**
 * Round trips until the code on both ends has settled: `cap` of them, or
 * fewer where they take over `ms`. From cold, the README loop's first
 * 6,000 round trips of 8 B ran at p50 10-19 us and p99 0.3-0.7 ms here,
 * and 6,000 after 3,000 to 100,000 others at p50 5-9 us and p99 12-62 us:
 * V8 compiles the path meanwhile, on a core the peer needs. A user's loop
 * runs long past that; the 200 round trips the bench warmed with did not.
 */
export async function warmRoundTrips(
  roundTrips: ((data: Uint8Array, back: Uint8Array, n: number) => Promise<number[]>) | undefined,
  data: Uint8Array,
  back: Uint8Array,
  cap: number,
  ms = WARM_MS,
): Promise<void> {
  if (!roundTrips) return;
  const t0 = performance.now();
  // One round trip first, then twice as many each time: a 64 MiB round
  // trip over node:net takes 55 ms, and the time is looked at only
  // between calls (each call of a C program is a process of its own).
  let n = 1;
  for (let done = 0; done < cap && performance.now() - t0 < ms; done += n, n = Math.min(2 * n, WARM_CHUNK)) {
    n = Math.min(n, cap - done);
    await roundTrips(data, back, n);
  }
}

/** The longest a series warms up at one size, and the most round trips it asks for at a time. */
const WARM_MS = 300;
const WARM_CHUNK = 200;
/** Untimed round trips before each turn. */
const TURN_WARM_MS = 2;
const TURN_WARM_CAP = 1000;

/** `items` in an order drawn from `seed`: the same for the same seed. */
function shuffled<T>(items: readonly T[], seed: number): T[] {
  const out = [...items];
  let state = seed >>> 0;
  const next = () => {
    // mulberry32
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 32;
  };
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(next() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}
