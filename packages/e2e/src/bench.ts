/**
 * The main job: a two-process transfer over the best backends both
 * processes have, with the baselines measured in the same run (memcpy into
 * a reused buffer, raw node:net between the same two processes).
 *
 *   node packages/e2e/dist/bench.js [--quick] [--rounds N] [--json FILE]
 */
import { writeFileSync } from "node:fs";
import { type Socket, connect } from "node:net";
import { type Allocation, CPU_DEVICE, type Pipe } from "@tensorpipe/core";
import { createContext } from "./backends.js";
import { spawnPeer } from "./spawn-peer.js";
import { type LatencySummary, fmt, median, summarize } from "./stats.js";

const args = process.argv.slice(2);
const quick = args.includes("--quick");
const jsonPath = args.includes("--json") ? args[args.indexOf("--json") + 1] : undefined;
const MiB = 1024 * 1024;
const ROUNDS = args.includes("--rounds") ? Number(args[args.indexOf("--rounds") + 1]) : quick ? 1 : 3;
const RTT_ITERATIONS = quick ? 500 : 4000;
const BULK_MESSAGES = quick ? 4 : 16;

const now = () => performance.now();

/** Round trips of a message with `size` bytes as a payload or as a tensor, into reused memory. */
async function pipeRoundTrips(pipe: Pipe, size: number, as: "payload" | "tensor", n: number): Promise<number[]> {
  const data = new Uint8Array(size).fill(1);
  const back = new Uint8Array(size);
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

/** GB/s of `count` messages of `size` bytes into the peer's reused buffer, acknowledged. */
async function pipeThroughput(pipe: Pipe, size: number, count: number): Promise<number> {
  const tensor = new Uint8Array(size).fill(3);
  const ack: Allocation = { payloads: [], tensors: [] };
  const t0 = now();
  const writes: Promise<void>[] = [];
  for (let i = 0; i < count; i++) {
    writes.push(pipe.write({ metadata: "sink", tensors: [{ buffer: tensor, targetDevice: CPU_DEVICE }] }));
  }
  for (let i = 0; i < count; i++) {
    await pipe.readDescriptor();
    await pipe.read(ack);
  }
  await Promise.all(writes);
  return (size * count) / ((now() - t0) / 1000) / 1e9;
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
  const src = new Uint8Array(size).fill(5);
  const dst = new Uint8Array(size);
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

const peer = await spawnPeer();
const context = createContext();
try {
  const pipe = await context.connect(peer.url);
  const channel = pipe.channelFor(CPU_DEVICE, CPU_DEVICE);
  console.log(`tensorpipe-js benchmark: two processes on 127.0.0.1 (peer pid ${peer.pid})`);
  console.log(`negotiated: transport=${pipe.transport} channel(cpu->cpu)=${channel}`);
  console.log(`rounds=${ROUNDS} (median reported), round trips per size=${RTT_ITERATIONS}\n`);

  const netSocket = await openSocket(peer.echoPort);
  // Warm both paths up before measuring.
  await pipeRoundTrips(pipe, 8, "tensor", 300);
  await pipeRoundTrips(pipe, 8, "payload", 300);
  await netRoundTrips(netSocket, 8, 300);

  const latency: Record<string, LatencySummary> = {};
  const rtt = { payload: [] as number[], tensor: [] as number[], net: [] as number[] };
  // Short alternating blocks, so that the machine's drift hits all three alike.
  const BLOCK = 250;
  for (let done = 0; done < ROUNDS * RTT_ITERATIONS; done += BLOCK) {
    rtt.payload.push(...(await pipeRoundTrips(pipe, 8, "payload", BLOCK)));
    rtt.tensor.push(...(await pipeRoundTrips(pipe, 8, "tensor", BLOCK)));
    rtt.net.push(...(await netRoundTrips(netSocket, 8, BLOCK)));
  }
  latency["pipe 8 B payload"] = summarize(rtt.payload);
  latency["pipe 8 B tensor"] = summarize(rtt.tensor);
  latency["node:net 8 B"] = summarize(rtt.net);
  for (const size of [64 * 1024, MiB, 16 * MiB, 64 * MiB]) {
    const n = Math.max(5, Math.min(200, Math.floor((256 * MiB) / size)));
    latency[`pipe ${label(size)} tensor`] = summarize(await pipeRoundTrips(pipe, size, "tensor", quick ? 5 : n));
  }
  netSocket.destroy();

  const bulk = { pipe: [] as number[], net: [] as number[], netLanded: [] as number[], memcpy: [] as number[] };
  await pipeThroughput(pipe, 64 * MiB, 2);
  await netThroughput(peer.sinkPort, 64 * MiB, 2, true);
  for (let r = 0; r < ROUNDS; r++) {
    bulk.memcpy.push(memcpyThroughput(64 * MiB, 8));
    bulk.pipe.push(await pipeThroughput(pipe, 64 * MiB, BULK_MESSAGES));
    bulk.netLanded.push(await netThroughput(peer.sinkPort, 64 * MiB, BULK_MESSAGES, true));
    bulk.net.push(await netThroughput(peer.sinkPort, 64 * MiB, BULK_MESSAGES, false));
  }
  pipe.close();

  console.log("round-trip latency (us)          p50        p99");
  for (const [name, s] of Object.entries(latency)) {
    console.log(`  ${name.padEnd(28)} ${fmt(s.p50).padStart(9)}  ${fmt(s.p99).padStart(9)}`);
  }
  const gb = {
    pipe: median(bulk.pipe),
    netLanded: median(bulk.netLanded),
    net: median(bulk.net),
    memcpy: median(bulk.memcpy),
  };
  console.log(`\n64 MiB one-way throughput (GB/s), ${BULK_MESSAGES} messages per round`);
  console.log(`  memcpy into a reused buffer              ${fmt(gb.memcpy, 2).padStart(7)}`);
  console.log(`  node:net, landing in a reused buffer     ${fmt(gb.netLanded, 2).padStart(7)}`);
  console.log(`  node:net, receiver only counts bytes     ${fmt(gb.net, 2).padStart(7)}`);
  console.log(`  pipe ${`${pipe.transport}+${channel}`.padEnd(10)} landing in user memory  ${fmt(gb.pipe, 2).padStart(6)}`);

  const ratios = {
    throughputVsNet: gb.pipe / gb.netLanded,
    throughputVsNetCountOnly: gb.pipe / gb.net,
    throughputVsMemcpy: gb.pipe / gb.memcpy,
    rttPayloadVsNet: latency["pipe 8 B payload"]!.p50 / latency["node:net 8 B"]!.p50,
    rttTensorVsNet: latency["pipe 8 B tensor"]!.p50 / latency["node:net 8 B"]!.p50,
  };
  console.log("\nratios measured in this run");
  console.log(`  64 MiB throughput, pipe / node:net landing      ${fmt(ratios.throughputVsNet, 2)}x  (target >= 1.3)`);
  console.log(`  64 MiB throughput, pipe / node:net counting     ${fmt(ratios.throughputVsNetCountOnly, 2)}x`);
  console.log(`  64 MiB throughput, pipe / memcpy                ${fmt(ratios.throughputVsMemcpy, 2)}x`);
  console.log(`  8 B RTT p50, pipe 8 B payload / node:net        ${fmt(ratios.rttPayloadVsNet, 2)}x  (target <= 1.0)`);
  console.log(`  8 B RTT p50, pipe 8 B tensor / node:net         ${fmt(ratios.rttTensorVsNet, 2)}x`);
  if (jsonPath) {
    writeFileSync(jsonPath, JSON.stringify({ transport: pipe.transport, channel, latency, throughput: gb, ratios }, null, 2));
  }
} finally {
  await context.close();
  await peer.stop();
}

function label(size: number): string {
  return size >= MiB ? `${size / MiB} MiB` : `${size / 1024} KiB`;
}
