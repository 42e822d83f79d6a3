/**
 * What the bench measures, each as a Measured: the pairs (a context with
 * one transport and one channel each), the README's loop over the pair
 * negotiation picks, and the baselines (memcpy, the C programs, node:net,
 * zeromq.js).
 */
import { type Socket, connect } from "node:net";
import { type Allocation, CPU_DEVICE, type ContextStats, type Pipe } from "@tensorpipe/core";
import type { CBaseline } from "./c-baseline.js";
import { type BackendChoice, createContext } from "./context.js";
import { ParallelMemcpy } from "./memcpy-baseline.js";
import type { SeriesResult } from "./result.js";
import { sinkThroughput } from "./sink-throughput.js";
import type { PeerProcess } from "./spawn-peer.js";
import { ZmqClient, loadZmq, spawnZmqPeer } from "./zmq-baseline.js";

/** One thing measured: a pipe or a baseline, with what it does per block. */
export interface Measured {
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
export async function readmeRoundTrips(pipe: Pipe, data: Uint8Array, back: Uint8Array, n: number): Promise<number[]> {
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
export async function nodeNet(peer: PeerProcess): Promise<Measured> {
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
export function memcpy(): Measured {
  const copier = new ParallelMemcpy();
  return {
    name: "memcpy",
    kind: "baseline",
    throughput: (data, count) => copier.throughput(data, count),
    close: () => copier.close(),
  };
}

export function cBaseline(c: CBaseline): Measured {
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
export async function readmeLoop(
  options: BackendChoice,
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

/** A pipe to `url` over one transport and one channel, or why there is none. */
export async function pairSeries(choice: BackendChoice, transport: string, channel: string, url: string): Promise<Measured> {
  const context = await createContext({ ...choice, transports: [transport], channels: [channel] });
  try {
    const pipe = await context.connect(url);
    const got = pipe.channelFor(CPU_DEVICE, CPU_DEVICE);
    if (got !== channel) throw new Error(`negotiated ${got ?? "no channel"}`);
    return {
      name: `${transport}+${channel}`,
      kind: "pipe",
      roundTrips: (data, back, n) => pipeRoundTrips(pipe, data, back, n),
      throughput: (data, count) => sinkThroughput(pipe, data, count),
      stats: () => context.stats(),
      close: () => context.close(),
    };
  } catch (e) {
    await context.close();
    throw e;
  }
}

/** zeromq.js to a zmq-peer process of its own, or why it cannot run here. */
export async function zeromq(): Promise<Measured | { missing: string }> {
  const { zmq, reason } = await loadZmq();
  if (!zmq) return { missing: reason! };
  const peer = await spawnZmqPeer();
  const client = ZmqClient.connect(zmq, peer.info);
  return {
    name: "zeromq",
    kind: "baseline",
    roundTrips: (data, _back, n) => client.roundTrips(data, n),
    throughput: (data, count) => client.throughput(data, count),
    async close() {
      client.close();
      await peer.stop();
    },
  };
}
