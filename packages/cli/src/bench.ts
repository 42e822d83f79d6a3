/**
 * `tensorpipe bench`: a peer process, every viable transport x channel pair
 * to it, a matrix of tensor sizes, and the baselines measured in the same
 * run in alternating blocks, so that a noisy machine's drift hits every
 * series alike: the machine's limits (memcpy on the best number of threads,
 * C programs doing the backends' exchange without Node) and the peers a
 * user would pick instead (node:net, zeromq.js).
 */
import { writeFileSync } from "node:fs";
import { type Socket, connect } from "node:net";
import { type Allocation, CPU_DEVICE, type Context, type ContextStats, type Pipe } from "@tensorpipe/core";
import { type BackendOptions, createContext, findBackends } from "./backends.js";
import { ProgressBar, type ProgressStream } from "./progress-bar.js";
import { sinkThroughput } from "./sink-throughput.js";
import { type PeerProcess, spawnPeer } from "./spawn-peer.js";
import { fmt, median, pairedRatio, summarize } from "./stats.js";
import { svgLinePlot } from "./svg-plot.js";
import { type CBaseline, C_SERIES, findCBaselines } from "./c-baseline.js";
import { ParallelMemcpy } from "./memcpy-baseline.js";
import { ZmqClient, loadZmq } from "./zmq-baseline.js";

const KiB = 1024;
const MiB = 1024 * KiB;
/** The sizes measured unless told: 8 B to 64 MiB. */
export const DEFAULT_SIZES = [8, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB];

/** What `tensorpipe bench` measures, and where it writes. */
export interface BenchOptions extends BackendOptions {
  /** Message sizes in bytes (default DEFAULT_SIZES). */
  sizes?: readonly number[];
  /** Rounds per cell; medians are reported (default 3, 1 with quick). */
  rounds?: number;
  /** Fewer iterations: a smoke run. */
  quick?: boolean;
  /** Only these transports. */
  transports?: readonly string[];
  /** Only these channels. */
  channels?: readonly string[];
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

/** One series at one size. */
export interface Cell {
  /** Round trip median, in microseconds. */
  p50?: number;
  /** Round trip 99th percentile, in microseconds. */
  p99?: number;
  /**
   * Streaming throughput, GB/s: the median of every turn of every round.
   * This machine has spells of about 100 ms in which one core's stores to
   * memory the other core read run 10x slower (the C ring shows them too),
   * and one such spell in one turn took a series' mean down by a third.
   */
  gbps: number;
  /** Every turn's bytes over every turn's time, spells included. */
  meanGbps: number;
  /** GB/s of each turn in the order they ran: the same index is the same turn in every series. */
  turnsGbps: number[];
}

/** One pipe or baseline over every size. */
export interface SeriesResult {
  /** "shm+cma", "memcpy", ... */
  name: string;
  /** user-code: a pipe timed through the code a user writes (README_LOOP), not a tuned loop. */
  kind: "pipe" | "baseline" | "user-code";
  /** For user-code: the pair it ran over, whose tuned series it is held against. */
  over?: string;
  /** By size in bytes. */
  cells: Record<number, Cell>;
}

/** Every figure of a run. */
export interface BenchResult {
  /** The sizes measured. */
  sizes: number[];
  /** Rounds per cell. */
  rounds: number;
  /** Every pipe and baseline. */
  series: SeriesResult[];
  /** Pairs and baselines left out, and why. */
  skipped: {
    /** The series. */
    name: string;
    /** Why it was left out. */
    reason: string;
  }[];
  /** The ratios printed (pair against baseline, targets), by name. */
  ratios: Record<string, number>;
  /** By size: the pair negotiation picks streamed head to head with the pair furthest ahead of it (none where there is no default pair). */
  headToHead: Record<number, HeadToHead>;
  /** What each pipe series' context carried over the whole run (pipe.stats() summed by context.stats()). */
  stats: Record<string, ContextStats>;
}

/**
 * The pair negotiation picks against the pair that came out furthest ahead
 * of it turn by turn, streamed again in short blocks that alternate A B B A:
 * blocks a millisecond apart share the machine's state, where a turn's
 * series lie up to 100 ms apart. Pairs that take the same path (shm+cma and
 * shm+basic below cma's inline size) came out of the turns at 0.82-0.89x
 * each other in some runs, the lowest of several noisy ratios; head to head
 * at 64 KiB, 0.92-1.10x over 40 blocks of 250 messages and 0.95-1.03x over
 * 320 of 60. Picking the pair in one measurement and timing it in another
 * keeps the noise that picked it out of the ratio.
 */
export interface HeadToHead {
  /** The pair held against; the default pair's own name where no pair came out ahead of it. */
  against: string;
  /** GB/s of each block of the default pair (empty where no pair was ahead). */
  own: number[];
  /** GB/s of each block of the pair held against, paired with `own` by index. */
  other: number[];
}

/** "8 B", "64 KiB", "1 MiB". */
export function sizeLabel(size: number): string {
  if (size >= MiB && size % MiB === 0) return `${size / MiB} MiB`;
  if (size >= KiB && size % KiB === 0) return `${size / KiB} KiB`;
  return `${size} B`;
}

/** "8", "64K", "1M", "1G" (binary units). */
export function parseSize(text: string): number {
  const m = /^(\d+)\s*([KMG]?)i?B?$/i.exec(text.trim());
  if (!m) throw new Error(`not a size: "${text}" (write 8, 64K, 1M)`);
  const unit = { "": 1, K: KiB, M: MiB, G: 1024 * MiB }[m[2]!.toUpperCase() as "" | "K" | "M" | "G"];
  const size = Number(m[1]) * unit;
  if (size < 1) throw new Error(`a size must be at least 1 byte: "${text}"`);
  return size;
}

/** One thing measured: a pipe or a baseline, with what it does per block. */
interface Measured {
  name: string;
  kind: SeriesResult["kind"];
  over?: string;
  roundTrips?(data: Uint8Array, back: Uint8Array, n: number): Promise<number[]>;
  throughput(data: Uint8Array, count: number): Promise<number>;
  /** For pipes: what their context carried. */
  stats?(): ContextStats;
  close(): Promise<void> | void;
}

/** The name of the series that times the README's loop. */
export const README_LOOP = "README loop";

/**
 * One round trip as the README writes it: a fresh message each time, the
 * write awaited, then the descriptor, then a read into memory the user keeps.
 */
export async function readmeRoundTrip(pipe: Pipe, data: Uint8Array, back: Uint8Array): Promise<void> {
  await pipe.write({ tensors: [{ buffer: data, targetDevice: CPU_DEVICE }] });
  const d = await pipe.readDescriptor();
  await pipe.read({ payloads: [], tensors: [{ buffer: back.subarray(0, d.tensors[0]!.length) }] });
}

/** `n` README round trips, each timed in microseconds. */
async function readmeRoundTrips(pipe: Pipe, data: Uint8Array, back: Uint8Array, n: number): Promise<number[]> {
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    await readmeRoundTrip(pipe, data, back);
    samples.push((performance.now() - t0) * 1000);
  }
  return samples;
}

async function pipeRoundTrips(pipe: Pipe, data: Uint8Array, back: Uint8Array, n: number): Promise<number[]> {
  const message = { tensors: [{ buffer: data, targetDevice: CPU_DEVICE }] };
  const allocation: Allocation = { payloads: [], tensors: [{ buffer: back }] };
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    const w = pipe.write(message);
    await pipe.readDescriptor();
    await pipe.read(allocation);
    await w;
    samples.push((performance.now() - t0) * 1000);
  }
  return samples;
}

function openSocket(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1", () => {
      s.setNoDelay(true);
      resolve(s);
    });
    s.once("error", reject);
  });
}

/** node:net: round trips on the peer's echo server, one-way bulk into its landing buffer. */
async function nodeNet(peer: PeerProcess): Promise<Measured> {
  const socket = await openSocket(peer.echoPort);
  return {
    name: "node:net",
    kind: "baseline",
    async roundTrips(data, _back, n) {
      const samples: number[] = [];
      let got = 0;
      let wake: () => void = () => undefined;
      const onData = (d: Buffer) => {
        got += d.length;
        if (got >= data.length) wake();
      };
      socket.on("data", onData);
      for (let i = 0; i < n; i++) {
        const t0 = performance.now();
        got = 0;
        const arrived = new Promise<void>((r) => (wake = r));
        socket.write(data);
        await arrived;
        samples.push((performance.now() - t0) * 1000);
      }
      socket.off("data", onData);
      return samples;
    },
    async throughput(data, count) {
      const s = await openSocket(peer.sinkPort);
      const header = Buffer.alloc(16);
      header.writeBigUInt64LE(BigInt(data.length * count));
      header.writeBigUInt64LE(BigInt(data.length), 8);
      const acked = new Promise<void>((r) => s.once("data", () => r()));
      const t0 = performance.now();
      s.write(header);
      for (let i = 0; i < count; i++) s.write(data);
      await acked;
      const gbps = (data.length * count) / ((performance.now() - t0) / 1000) / 1e9;
      s.destroy();
      return gbps;
    },
    close: () => void socket.destroy(),
  };
}

/** The machine's limit for a same-machine copy: memcpy on the best number of threads. */
function memcpy(): Measured {
  const copier = new ParallelMemcpy();
  return {
    name: "memcpy",
    kind: "baseline",
    throughput: (data, count) => copier.throughput(data, count),
    close: () => copier.close(),
  };
}

function cBaseline(c: CBaseline): Measured {
  return {
    name: c.name,
    kind: "baseline",
    ...(c.spec.roundTrips ? { roundTrips: async (data: Uint8Array, _back: Uint8Array, n: number) => (await c.roundTrips(data.length, n)).us } : {}),
    throughput: (data, count) => c.throughput(data.length, count),
    close: () => undefined,
  };
}

/**
 * The README's loop over a pipe negotiated as a user's would be, with
 * every viable backend: shm between two processes here, else uv.
 */
async function readmeLoop(
  options: BenchOptions,
  transports: string[],
  channels: string[],
  peer: PeerProcess,
): Promise<{ pair: string; measured: Measured } | undefined> {
  const scheme = transports.includes("shm") ? "shm" : transports[0];
  const url = peer.urls.find((u) => u.startsWith(`${scheme}://`));
  if (!url || channels.length === 0) return undefined;
  const context = await createContext({ ...options, transports, channels });
  let pipe: Pipe;
  try {
    pipe = await context.connect(url);
  } catch (e) {
    await context.close();
    throw e;
  }
  const pair = `${pipe.transport}+${pipe.channelFor(CPU_DEVICE, CPU_DEVICE)}`;
  return {
    pair,
    measured: {
      name: README_LOOP,
      kind: "user-code",
      over: pair,
      roundTrips: (data, back, n) => readmeRoundTrips(pipe, data, back, n),
      throughput: (data, count) => sinkThroughput(pipe, data, count),
      stats: () => context.stats(),
      close: () => context.close(),
    },
  };
}

/** Runs the benchmark against a peer process it spawns, prints the report and returns the figures. */
export async function runBench(options: BenchOptions = {}): Promise<BenchResult> {
  const print = options.print ?? ((line: string) => console.log(line));
  const sizes = [...(options.sizes ?? DEFAULT_SIZES)].sort((a, b) => a - b);
  const rounds = options.rounds ?? (options.quick ? 1 : 3);
  // Bytes per throughput block: a block of large tensors lasts 50-500 ms.
  const budget = options.quick ? 8 * MiB : 1024 * MiB;
  const rttCount = (size: number) => Math.max(3, Math.min(options.quick ? 100 : 1000, Math.floor(budget / 2 / size)));
  // Small messages are many: enough of them that a block lasts long enough
  // for the machine's noise to average out (10,000 of 4 KiB take ~50 ms).
  const bulkCount = (size: number) => Math.max(2, Math.min(options.quick ? 2000 : 10_000, Math.floor(budget / size)));

  const skipped: BenchResult["skipped"] = [];
  const found = await findBackends(options);
  const viable = (kind: "transport" | "channel", wanted?: readonly string[]) =>
    found.filter((b) => {
      if (b.spec.kind !== kind || (wanted && !wanted.includes(b.spec.name))) return false;
      if (b.spec.memory === "cuda") return false;
      if (!b.viability.viable && b.installed) skipped.push({ name: b.spec.name, reason: b.viability.reason });
      return b.viability.viable;
    });
  const transports = viable("transport", options.transports);
  const channels = viable("channel", options.channels);

  const peerArgs = [
    ...(options.noZmq ? [] : ["--zmq"]),
    ...(options.lanes ? ["--lanes", String(options.lanes)] : []),
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
        const name = `${t.spec.name}+${c.spec.name}`;
        const url = peer.urls.find((u) => u.startsWith(`${t.spec.name}://`));
        if (!url) {
          skipped.push({ name, reason: `the peer does not listen on ${t.spec.name}` });
          continue;
        }
        const context: Context = await createContext({ ...options, transports: [t.spec.name], channels: [c.spec.name] });
        try {
          const pipe = await context.connect(url);
          const got = pipe.channelFor(CPU_DEVICE, CPU_DEVICE);
          if (got !== c.spec.name) throw new Error(`negotiated ${got ?? "no channel"}`);
          measured.push({
            name,
            kind: "pipe",
            roundTrips: (data, back, n) => pipeRoundTrips(pipe, data, back, n),
            throughput: (data, count) => sinkThroughput(pipe, data, count),
            stats: () => context.stats(),
            close: () => context.close(),
          });
        } catch (e) {
          skipped.push({ name, reason: (e as Error).message });
          await context.close();
        }
      }
    }
    const userCode = await readmeLoop(options, transports.map((t) => t.spec.name), channels.map((c) => c.spec.name), peer);
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
      const { zmq } = await loadZmq();
      if (zmq && "echo" in peer.zmq) {
        const client = ZmqClient.connect(zmq, peer.zmq);
        measured.push({
          name: "zeromq",
          kind: "baseline",
          roundTrips: (data, _back, n) => client.roundTrips(data, n),
          throughput: (data, count) => client.throughput(data, count),
          close: () => client.close(),
        });
      } else {
        skipped.push({ name: "zeromq", reason: "missing" in peer.zmq ? peer.zmq.missing : "not installed here" });
      }
    }
    for (const s of skipped) print(`  skipped ${s.name}: ${s.reason}`);

    const samples = new Map<string, { rtt: number[]; gbps: number[] }>();
    const headToHead: BenchResult["headToHead"] = {};
    const bar = new ProgressBar(sizes.length * rounds * measured.length, options.progress ?? process.stderr);
    for (const size of sizes) {
      const data = new Uint8Array(size).fill(1);
      const back = new Uint8Array(size);
      for (const m of measured) {
        // Warm: the JIT, the rings and socket buffers, the pages on both ends
        // (cma turns large buffers into huge pages over its first transfers).
        await warmRoundTrips(m.roundTrips?.bind(m), data, back, options.quick ? Math.min(200, rttCount(size)) : 20_000);
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
      const own = measured.find((m) => m.kind === "pipe" && m.name === userCode?.pair);
      if (own) {
        const gbpsOf = (m: Measured) => samples.get(`${m.name}/${size}`)!.gbps;
        const others = measured.filter((m) => m.kind === "pipe" && m !== own);
        const ahead = others.map((m) => ({ m, ratio: pairedRatio(gbpsOf(own), gbpsOf(m)) })).sort((a, b) => a.ratio - b.ratio)[0];
        if (!ahead || ahead.ratio >= 1) headToHead[size] = { against: own.name, own: [], other: [] };
        else {
          bar.show(`${own.name} against ${ahead.m.name} ${sizeLabel(size)}, head to head`);
          headToHead[size] = await streamHeadToHead(own, ahead.m, data, median(gbpsOf(own)), options.quick ? 2 : undefined);
        }
      }
    }
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

/** Each pipe against each baseline at the largest size (GB/s) and the smallest (round trip p50). */
function ratiosOf(series: readonly SeriesResult[], sizes: readonly number[], headToHead: BenchResult["headToHead"]): Record<string, number> {
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

function report(result: BenchResult, print: (line: string) => void, showTargets: boolean): void {
  const width = Math.max(10, ...result.series.map((s) => s.name.length)) + 2;
  print(`\n${"size".padEnd(9)}${"series".padEnd(width)}${"p50 us".padStart(10)}${"p99 us".padStart(10)}${"GB/s".padStart(9)}${"mean".padStart(9)}`);
  for (const size of result.sizes) {
    result.series.forEach((s, i) => {
      const c = s.cells[size]!;
      const lat = c.p50 === undefined ? ["", ""] : [fmt(c.p50), fmt(c.p99!)];
      print(`${(i === 0 ? sizeLabel(size) : "").padEnd(9)}${s.name.padEnd(width)}${lat[0]!.padStart(10)}${lat[1]!.padStart(10)}${fmt(c.gbps, 3).padStart(9)}${fmt(c.meanGbps, 3).padStart(9)}`);
    });
  }
  print("GB/s: the median of every turn; mean: all turns' bytes over their time, the machine's slow spells included");
  print(`\nratios measured in this run: GB/s at ${sizeLabel(result.sizes.at(-1)!)} (higher is better; the median of the ratios turn by turn), round trip p50 at ${sizeLabel(result.sizes[0]!)} (lower is better)`);
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
  if (kernel !== undefined) print(`  ${C_SERIES.cma.padEnd(12)} GB/s ${fmt(kernel, 2)}x memcpy (cma's copy without Node: the kernel's part of cma's gap to memcpy)`);
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

function plot(result: BenchResult): string {
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
