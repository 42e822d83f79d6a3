/**
 * The main job: transfers between two processes over the best backends both
 * have (and over uv+basic, the portable path), with the baselines measured
 * in the same run: memcpy into a reused buffer, raw node:net between the
 * same two processes.
 *
 *   node packages/e2e/dist/bench.js [--quick] [--rounds N] [--json FILE]
 */
import { writeFileSync } from "node:fs";
import { type Socket, connect } from "node:net";
import { type Allocation, CPU_DEVICE, type Context, type Pipe } from "@tensorpipe/core";
import { createContext } from "./backends.js";
import { sinkThroughput } from "./sink-throughput.js";
import { spawnPeer } from "./spawn-peer.js";
import { type LatencySummary, fmt, median, summarize } from "./stats.js";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const jsonPath = args.includes("--json") ? args[args.indexOf("--json") + 1] : undefined;
const MiB = 1024 * 1024;
const ROUNDS = args.includes("--rounds") ? Number(args[args.indexOf("--rounds") + 1]) : quick ? 1 : 3;
const RTT_ITERATIONS = quick ? 500 : 3000;
const BULK_MESSAGES = quick ? 4 : 16;
const SIZES = [64 * 1024, MiB, 16 * MiB, 64 * MiB];

const now = () => performance.now();

// Buffers live as long as the run, as a program's tensors would across iterations.
const buffers = new Map<string, Uint8Array>();
function buffer(key: string, size: number, fill: number): Uint8Array {
  let b = buffers.get(`${key}/${size}`);
  if (!b) buffers.set(`${key}/${size}`, (b = new Uint8Array(size).fill(fill)));
  return b;
}

/** Round trips of a message with `size` bytes as a payload or as a tensor, into reused memory. */
async function pipeRoundTrips(pipe: Pipe, size: number, as: "payload" | "tensor", n: number): Promise<number[]> {
  const data = buffer("out", size, 1);
  const back = buffer("back", size, 0);
  const message =
    as === "payload" ? { payloads: [{ data }] } : { tensors: [{ buffer: data, targetDevice: CPU_DEVICE }] };
  const allocation: Allocation =
    as === "payload" ? { payloads: [{ data: back }], tensors: [] } : { payloads: [], tensors: [{ buffer: back }] };
  const samples: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = now();
    const w = pipe.write(message);
    await pipe.readDescriptor();
    await pipe.read(allocation);
    await w;
    samples.push((now() - t0) * 1000);
  }
  return samples;
}

async function netRoundTrips(socket: Socket, size: number, n: number): Promise<number[]> {
  const data = Buffer.alloc(size, 1);
  const samples: number[] = [];
  let got = 0;
  let wake: () => void = () => undefined;
  socket.on("data", (d) => {
    got += d.length;
    if (got >= size) wake();
  });
  for (let i = 0; i < n; i++) {
    const t0 = now();
    got = 0;
    const arrived = new Promise<void>((r) => (wake = r));
    socket.write(data);
    await arrived;
    samples.push((now() - t0) * 1000);
  }
  socket.removeAllListeners("data");
  return samples;
}

async function pipeThroughput(pipe: Pipe, size: number, count: number): Promise<number> {
  return sinkThroughput(pipe, buffer("bulk", size, 3), count);
}

/** node:net to the peer's sink; `land`: the receiver copies each message into a reused buffer. */
async function netThroughput(port: number, size: number, count: number, land: boolean): Promise<number> {
  const socket = await openSocket(port);
  const chunk = Buffer.alloc(size, 3);
  const header = Buffer.alloc(16);
  header.writeBigUInt64LE(BigInt(size * count));
  header.writeBigUInt64LE(BigInt(land ? size : 0), 8);
  const acked = new Promise<void>((r) => socket.once("data", () => r()));
  const t0 = now();
  socket.write(header);
  for (let i = 0; i < count; i++) socket.write(chunk);
  await acked;
  const gbps = (size * count) / ((now() - t0) / 1000) / 1e9;
  socket.destroy();
  return gbps;
}

function memcpyThroughput(size: number, count: number): number {
  const src = buffer("memcpy-src", size, 5);
  const dst = buffer("memcpy-dst", size, 0);
  dst.set(src);
  const t0 = now();
  for (let i = 0; i < count; i++) dst.set(src);
  return (size * count) / ((now() - t0) / 1000) / 1e9;
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

function label(size: number): string {
  return size >= MiB ? `${size / MiB} MiB` : size >= 1024 ? `${size / 1024} KiB` : `${size} B`;
}

interface Path {
  name: string;
  context: Context;
  pipe: Pipe;
  latency: Record<string, LatencySummary>;
  throughput: number[];
}

const peer = await spawnPeer();
const paths: Path[] = [];
try {
  console.log(`tensorpipe-js benchmark: two processes on this machine (peer pid ${peer.pid})`);
  for (const choice of [{}, { transports: ["uv"], channels: ["basic"] }]) {
    const context = createContext(choice);
    const pipe = await context.connect(peer.url);
    const name = `${pipe.transport}+${pipe.channelFor(CPU_DEVICE, CPU_DEVICE)}`;
    if (paths.some((p) => p.name === name)) {
      await context.close();
      continue;
    }
    paths.push({ name, context, pipe, latency: {}, throughput: [] });
    console.log(`negotiated: transport=${pipe.transport} channel(cpu->cpu)=${pipe.channelFor(CPU_DEVICE, CPU_DEVICE)}`);
  }
  console.log(`rounds=${ROUNDS} (median reported), 8 B round trips per path=${ROUNDS * RTT_ITERATIONS}\n`);

  const netSocket = await openSocket(peer.echoPort);
  for (const p of paths) {
    await pipeRoundTrips(p.pipe, 8, "tensor", 300);
    await pipeRoundTrips(p.pipe, 8, "payload", 300);
  }
  await netRoundTrips(netSocket, 8, 300);

  // Short alternating blocks, so that the machine's drift hits every path alike.
  const samples = new Map<string, number[]>();
  const add = (key: string, s: number[]) => samples.set(key, [...(samples.get(key) ?? []), ...s]);
  const BLOCK = 250;
  for (let done = 0; done < ROUNDS * RTT_ITERATIONS; done += BLOCK) {
    for (const p of paths) {
      add(`${p.name} payload`, await pipeRoundTrips(p.pipe, 8, "payload", BLOCK));
      add(`${p.name} tensor`, await pipeRoundTrips(p.pipe, 8, "tensor", BLOCK));
    }
    add("net", await netRoundTrips(netSocket, 8, BLOCK));
  }
  netSocket.destroy();
  const netRtt = summarize(samples.get("net")!);
  for (const p of paths) {
    p.latency["8 B payload"] = summarize(samples.get(`${p.name} payload`)!);
    p.latency["8 B tensor"] = summarize(samples.get(`${p.name} tensor`)!);
    for (const size of SIZES) {
      const n = quick ? 5 : Math.max(10, Math.min(300, Math.floor((512 * MiB) / size)));
      p.latency[`${label(size)} tensor`] = summarize(await pipeRoundTrips(p.pipe, size, "tensor", n));
    }
  }

  const bulk = { netLanded: [] as number[], net: [] as number[], memcpy: [] as number[] };
  for (const p of paths) await pipeThroughput(p.pipe, 64 * MiB, 2);
  await netThroughput(peer.sinkPort, 64 * MiB, 2, true);
  for (let r = 0; r < ROUNDS; r++) {
    bulk.memcpy.push(memcpyThroughput(64 * MiB, 8));
    for (const p of paths) p.throughput.push(await pipeThroughput(p.pipe, 64 * MiB, BULK_MESSAGES));
    bulk.netLanded.push(await netThroughput(peer.sinkPort, 64 * MiB, BULK_MESSAGES, true));
    bulk.net.push(await netThroughput(peer.sinkPort, 64 * MiB, BULK_MESSAGES, false));
  }

  console.log(`round-trip latency (us), p50 / p99`);
  const keys = Object.keys(paths[0]!.latency);
  console.log(`  ${"".padEnd(14)}${paths.map((p) => p.name.padStart(22)).join("")}${"node:net".padStart(22)}`);
  for (const k of keys) {
    const cells = paths.map((p) => `${fmt(p.latency[k]!.p50)} / ${fmt(p.latency[k]!.p99)}`.padStart(22)).join("");
    const net = k === "8 B payload" ? `${fmt(netRtt.p50)} / ${fmt(netRtt.p99)}` : "";
    console.log(`  ${k.padEnd(14)}${cells}${net.padStart(22)}`);
  }
  const gb = { netLanded: median(bulk.netLanded), net: median(bulk.net), memcpy: median(bulk.memcpy) };
  console.log(`\n64 MiB one-way throughput (GB/s), ${BULK_MESSAGES} messages per round`);
  console.log(`  memcpy into a reused buffer              ${fmt(gb.memcpy, 2).padStart(7)}`);
  console.log(`  node:net, landing in a reused buffer     ${fmt(gb.netLanded, 2).padStart(7)}`);
  console.log(`  node:net, receiver only counts bytes     ${fmt(gb.net, 2).padStart(7)}`);
  for (const p of paths) console.log(`  pipe ${p.name.padEnd(10)} into user memory      ${fmt(median(p.throughput), 2).padStart(7)}`);

  console.log("\nratios measured in this run");
  const ratios: Record<string, number> = {};
  for (const p of paths) {
    const t = median(p.throughput);
    ratios[`${p.name} 64 MiB / memcpy`] = t / gb.memcpy;
    ratios[`${p.name} 64 MiB / node:net landing`] = t / gb.netLanded;
    ratios[`${p.name} 64 MiB / node:net counting`] = t / gb.net;
    ratios[`${p.name} 8 B RTT p50 / node:net`] = p.latency["8 B payload"]!.p50 / netRtt.p50;
  }
  const targets: Record<string, string> = {
    "uv+basic 64 MiB / node:net landing": "target >= 1.3",
    "uv+basic 8 B RTT p50 / node:net": "target <= 1.0",
    "shm+cma 64 MiB / memcpy": "target >= 0.9",
  };
  for (const [k, v] of Object.entries(ratios)) {
    console.log(`  ${k.padEnd(40)} ${fmt(v, 2).padStart(6)}x  ${targets[k] ? `(${targets[k]})` : ""}`);
  }
  const shm = paths.find((p) => p.name === "shm+cma");
  if (shm) console.log(`  shm+cma 8 B RTT p50 ${fmt(shm.latency["8 B payload"]!.p50)} us (target <= 15 us)`);
  if (jsonPath) {
    const out = {
      paths: paths.map((p) => ({ name: p.name, latency: p.latency, throughput: median(p.throughput) })),
      baselines: { ...gb, netRtt },
      ratios,
    };
    writeFileSync(jsonPath, JSON.stringify(out, null, 2));
  }
} finally {
  for (const p of paths) await p.context.close();
  await peer.stop();
}
