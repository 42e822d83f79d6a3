/**
 * `tensorpipe bench`: how fast the backends installed here move messages
 * between two processes of this machine, against node:net in the same run.
 * It spawns `tensorpipe peer` and times, at each size, round trips and a
 * one-way stream over every viable transport x channel pair, over the pair
 * negotiation picks by default (the code a user writes), and over node:net.
 * The repository's own bench (the machine's limits, zeromq.js, the
 * project's targets) is not part of this package.
 */
import { spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { type Socket, connect } from "node:net";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { CPU_DEVICE, type Context, ErrorCode, type Pipe, TensorPipeError } from "@tensorpipe/core";
import { type BackendOptions, checkNames, createContext, findBackends } from "./backends.js";
import { type SizeFigures, sizeLabel, summarize } from "./figures.js";

const MiB = 1024 * 1024;
/** The sizes measured unless told: 8 B to 64 MiB. */
export const DEFAULT_SIZES = [8, 4096, 65536, MiB, 16 * MiB, 64 * MiB];

/** What `tensorpipe bench` measures. */
export interface BenchOptions extends BackendOptions {
  /** Message sizes in bytes (default DEFAULT_SIZES). */
  sizes?: readonly number[];
  /** Fewer messages: a smoke run of seconds. */
  quick?: boolean;
  /** Only these transports. */
  transports?: readonly string[];
  /** Only these channels. */
  channels?: readonly string[];
  /** Where to write every figure as JSON. */
  jsonPath?: string;
  /** Where the report goes, a line at a time (default stdout). */
  print?: (line: string) => void;
}

/** One thing timed: a pipe or node:net. */
interface Series {
  name: string;
  roundTrip(data: Uint8Array, back: Uint8Array): Promise<void>;
  /** GB/s of `count` messages of `data` one way, all in flight, each acknowledged. */
  stream(data: Uint8Array, count: number): Promise<number>;
  close(): Promise<void> | void;
}

/** Every figure of a run: by series name, then by size. */
export interface BenchFigures {
  /** The pair negotiation picks with every viable backend. */
  defaultPair?: string;
  /** Pairs left out, and why. */
  skipped: { name: string; reason: string }[];
  series: Record<string, Record<number, SizeFigures>>;
}

/** Runs the bench against a peer process it spawns and prints the table. */
export async function runBench(options: BenchOptions = {}): Promise<BenchFigures> {
  const print = options.print ?? ((line: string) => console.log(line));
  // A line that redraws itself, on a terminal only: a log keeps none of its escapes.
  const progress = process.stderr.isTTY;
  const sizes = [...(options.sizes ?? DEFAULT_SIZES)].sort((a, b) => a - b);
  const figures: BenchFigures = { skipped: [], series: {} };
  const found = await findBackends(options);
  checkNames(found, options);
  const usable = (kind: "transport" | "channel", wanted?: readonly string[]) => {
    return found
      .filter((b) => b.spec.kind === kind && (!wanted || wanted.includes(b.spec.name)))
      .filter((b) => {
        if (b.spec.memory === "cuda") {
          if (wanted) figures.skipped.push({ name: b.spec.name, reason: "it moves GPU tensors: bench-cuda measures those" });
          return false;
        }
        if (!b.viability.viable && (b.installed || wanted)) figures.skipped.push({ name: b.spec.name, reason: b.viability.reason });
        return b.viability.viable;
      })
      .map((b) => b.spec.name);
  };
  const transports = usable("transport", options.transports);
  const channels = usable("channel", options.channels);
  if (transports.length === 0 || channels.length === 0) {
    const none = transports.length === 0 ? "transport" : "CPU channel";
    const why = figures.skipped.map((s) => `${s.name}: ${s.reason}`).join("; ");
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `nothing to measure: no ${none} that runs here among those asked for${why ? ` (${why})` : ""}`);
  }
  const peer = await startPeer(options);
  const series: Series[] = [];
  try {
    for (const t of transports) {
      for (const c of channels) {
        const pair = await pipeSeries(options, peer.urls, [t], [c]);
        if ("reason" in pair) figures.skipped.push({ name: `${t}+${c}`, reason: pair.reason });
        else series.push(pair);
      }
    }
    const picked = await pipeSeries(options, peer.urls, transports, channels);
    if (!("reason" in picked)) {
      figures.defaultPair = picked.name;
      series.push({ ...picked, name: "default pair" });
    }
    series.push(await nodeNet(peer.echoPort, peer.sinkPort));
    print(`tensorpipe bench: two processes on this machine (peer pid ${peer.pid}); negotiation picks ${figures.defaultPair ?? "nothing"}`);
    for (const s of figures.skipped) print(`  skipped ${s.name}: ${s.reason}`);
    const width = Math.max(14, ...series.map((s) => s.name.length)) + 2;
    print(`\n${"size".padEnd(9)}${"series".padEnd(width)}${"p50 us".padStart(10)}${"p99 us".padStart(10)}${"GB/s".padStart(9)}`);
    for (const size of sizes) {
      const data = new Uint8Array(size).fill(1);
      const back = new Uint8Array(size);
      const roundTrips = Math.max(5, Math.min(options.quick ? 200 : 2000, Math.floor(((options.quick ? 16 : 512) * MiB) / size)));
      const messages = Math.max(4, Math.min(options.quick ? 500 : 5000, Math.floor(((options.quick ? 32 : 1024) * MiB) / size)));
      for (const s of series) {
        if (progress) process.stderr.write(`\r\x1b[K${sizeLabel(size)}: ${s.name}`);
        // Warm: the JIT, the rings and socket buffers, the pages on both ends.
        for (let i = 0; i < Math.min(roundTrips, 200); i++) await s.roundTrip(data, back);
        await s.stream(data, Math.min(messages, 8));
        const samples: number[] = [];
        for (let i = 0; i < roundTrips; i++) {
          const t0 = performance.now();
          await s.roundTrip(data, back);
          samples.push((performance.now() - t0) * 1000);
        }
        const cell = { ...summarize(samples), gbps: await s.stream(data, messages) };
        (figures.series[s.name] ??= {})[size] = cell;
        if (progress) process.stderr.write("\r\x1b[K");
        print(
          `${(s === series[0] ? sizeLabel(size) : "").padEnd(9)}${s.name.padEnd(width)}${cell.p50.toFixed(1).padStart(10)}${cell.p99.toFixed(1).padStart(10)}${cell.gbps.toFixed(3).padStart(9)}`,
        );
      }
    }
    const net = figures.series["node:net"]!;
    const [small, big] = [sizes[0]!, sizes.at(-1)!];
    print(`\nagainst node:net in this run: GB/s at ${sizeLabel(big)} (higher is better), round trip p50 at ${sizeLabel(small)} (lower is better)`);
    for (const s of series.filter((x) => x.name !== "node:net")) {
      const cells = figures.series[s.name]!;
      print(
        `  ${s.name.padEnd(width)}${(cells[big]!.gbps / net[big]!.gbps).toFixed(2)}x GB/s, ${(cells[small]!.p50 / net[small]!.p50).toFixed(2)}x round trip`,
      );
    }
    if (options.jsonPath) writeFileSync(options.jsonPath, `${JSON.stringify(figures, null, 2)}\n`);
    return figures;
  } finally {
    for (const s of series) await s.close();
    await peer.stop();
  }
}

/** A pipe to the peer over these backends, or why there is none. */
async function pipeSeries(options: BenchOptions, urls: readonly string[], transports: string[], channels: string[]): Promise<Series | { reason: string }> {
  // shm where both ends have it, as negotiation would pick it.
  const offered = urls.filter((u) => transports.includes(u.slice(0, u.indexOf(":"))));
  const url = offered.find((u) => u.startsWith("shm:")) ?? offered[0];
  if (!url) return { reason: `the peer does not listen on ${transports.join(" or ")}` };
  const context: Context = await createContext({ ...options, transports, channels });
  let pipe: Pipe;
  try {
    pipe = await context.connect(url);
  } catch (e) {
    await context.close();
    return { reason: (e as Error).message };
  }
  const channel = pipe.channelFor(CPU_DEVICE, CPU_DEVICE);
  if (channel === undefined) {
    await context.close();
    return { reason: `no channel for CPU tensors in common with the peer among ${channels.join(", ") || "none"}` };
  }
  const name = `${pipe.transport}+${channel}`;
  const ack = { payloads: [], tensors: [] };
  return {
    name,
    // As the README writes it: a fresh message, the write awaited, then the descriptor, then a read into memory the user keeps.
    async roundTrip(data, back) {
      await pipe.write({ tensors: [{ buffer: data, targetDevice: CPU_DEVICE }] });
      const d = await pipe.readDescriptor();
      await pipe.read({ payloads: [], tensors: [{ buffer: back.subarray(0, d.tensors[0]!.length) }] });
    },
    async stream(data, count) {
      const t0 = performance.now();
      const writes = Array.from({ length: count }, () => pipe.write({ metadata: "sink", tensors: [{ buffer: data, targetDevice: CPU_DEVICE }] }));
      for (let i = 0; i < count; i++) {
        await pipe.readDescriptor();
        await pipe.read(ack);
      }
      await Promise.all(writes);
      return (data.length * count) / ((performance.now() - t0) / 1000) / 1e9;
    },
    close: () => context.close(),
  };
}

function openSocket(port: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1", () => resolve(s.setNoDelay(true)));
    s.once("error", reject);
  });
}

/** node:net: round trips on the peer's echo server, one-way bulk into its sink's landing buffer. */
async function nodeNet(echoPort: number, sinkPort: number): Promise<Series> {
  const socket = await openSocket(echoPort);
  let expected = 0;
  let wake: () => void = () => undefined;
  socket.on("data", (d: Buffer) => {
    expected -= d.length;
    if (expected <= 0) wake();
  });
  return {
    name: "node:net",
    roundTrip(data) {
      expected = data.length;
      const echoed = new Promise<void>((r) => (wake = r));
      socket.write(data);
      return echoed;
    },
    async stream(data, count) {
      const s = await openSocket(sinkPort);
      const header = Buffer.alloc(16);
      header.writeBigUInt64LE(BigInt(data.length * count));
      header.writeBigUInt64LE(BigInt(data.length), 8);
      const acked = new Promise<void>((r) => s.once("data", () => r()));
      const t0 = performance.now();
      s.write(header);
      for (let i = 0; i < count; i++) s.write(data);
      await acked;
      s.destroy();
      return (data.length * count) / ((performance.now() - t0) / 1000) / 1e9;
    },
    close: () => void socket.destroy(),
  };
}

/** `tensorpipe peer` in a child process, and the addresses it printed. */
async function startPeer(options: BenchOptions) {
  const main = fileURLToPath(new URL("./main.js", import.meta.url));
  const args = [
    main,
    "peer",
    ...(options.lanes ? ["--lanes", String(options.lanes)] : []),
    ...(options.parallelism ? ["--copy-threads", String(options.parallelism)] : []),
    ...(options.backends ?? []).flatMap((b) => ["--backend", b]),
  ];
  const child = spawn(process.execPath, args, { stdio: ["pipe", "pipe", "inherit"] });
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout! }).once("line", resolve);
    child.once("exit", (code) => reject(new Error(`tensorpipe peer exited with ${code} before listening`)));
  });
  const info = JSON.parse(line) as { urls: string[]; echoPort: number; sinkPort: number; pid: number };
  const exited = new Promise((r) => child.once("exit", r));
  return {
    ...info,
    async stop() {
      child.stdin!.end();
      await exited;
    },
  };
}
