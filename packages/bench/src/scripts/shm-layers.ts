/**
 * Where an 8 B round trip over shm goes, layer by layer, each timed without
 * a break between two processes in one run:
 * - the C ring (`shm ring (C)`, its two processes on two cores): the machine;
 * - the shm addon's connection, the far end writing each frame back from the
 *   read's callback, and the same with an await on each side: Node's loop,
 *   a call into JS and promises, with no pipe;
 * - a pipe over shm+basic echoing messages of metadata alone: the pipe's
 *   descriptor and bookkeeping;
 * - the README's loop (an 8 B tensor, a fresh message each time) over the
 *   pair negotiated with every backend installed.
 *
 *   node packages/bench/dist/scripts/shm-layers.js [--seconds S] [--json]
 */
import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { CBaseline, C_SERIES, createContext, fmt, readmeRoundTrip, spawnPeer, summarize } from "../index.js";
import { CPU_DEVICE, type Connection, type Pipe } from "@tensorpipe/core/backend";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { printResults, scriptArgs } from "./script.js";

/** One layer's round trips. */
export interface Layer {
  name: string;
  /** Round trips timed. */
  count: number;
  /** Median, microseconds. */
  p50: number;
  /** 99th percentile, microseconds. */
  p99: number;
}

// Round trips one after another for `seconds`, each timed.
const loopFor = async (seconds: number, roundTrip: () => Promise<void> | void): Promise<number[]> => {
  const samples: number[] = [];
  const end = performance.now() + seconds * 1000;
  while (performance.now() < end) {
    const t0 = performance.now();
    await roundTrip();
    samples.push((performance.now() - t0) * 1000);
  }
  return samples;
};

const layer = (name: string, samples: number[]): Layer => ({ name, count: samples.length, ...summarize(samples) });

async function startEcho(style: "callback" | "await"): Promise<{ child: ChildProcess; name: string }> {
  const script = fileURLToPath(new URL("../../dist/scripts/shm-echo.js", import.meta.url));
  const child = spawn(process.execPath, [script, style], { stdio: ["pipe", "pipe", "inherit"] });
  const [name] = (await once(createInterface({ input: child.stdout! }), "line")) as [string];
  return { child, name };
}

async function stopEcho(child: ChildProcess): Promise<void> {
  const exited = once(child, "exit");
  child.stdin!.end();
  await exited;
}

/** Round trips over a bare shm connection to an echo process answering in `style`; timed in the same style here. */
async function bareConnection(style: "callback" | "await", seconds: number): Promise<number[]> {
  const echo = await startEcho(style);
  const c: Connection = await new ShmTransport().connect(echo.name);
  const frames = [new Uint8Array(8)];
  try {
    if (style === "await") {
      return await loopFor(seconds, async () => {
        await c.write(frames);
        await c.read(64);
      });
    }
    // Callbacks all the way: the next round trip starts from the last one's callback.
    return await new Promise<number[]>((resolve, reject) => {
      const samples: number[] = [];
      const end = performance.now() + seconds * 1000;
      const go = (): void => {
        const t0 = performance.now();
        c.write(frames).catch(reject);
        c.readFrame!(64, (err) => {
          if (err) return reject(err);
          const now = performance.now();
          samples.push((now - t0) * 1000);
          if (now < end) go();
          else resolve(samples);
        });
      };
      go();
    });
  } finally {
    c.close();
    await stopEcho(echo.child);
  }
}

async function pipeLoop(pipe: Pipe, seconds: number, readme: boolean): Promise<number[]> {
  if (readme) {
    const data = new Uint8Array(8).fill(1);
    const back = new Uint8Array(8);
    return loopFor(seconds, () => readmeRoundTrip(pipe, data, back));
  }
  const message = { metadata: "" };
  const nothing = { payloads: [], tensors: [] };
  return loopFor(seconds, async () => {
    const written = pipe.write(message);
    await pipe.readDescriptor();
    await pipe.read(nothing);
    await written;
  });
}

/** Every layer, `seconds` each (the C ring takes a fixed count instead: it is fast). */
export async function measureShmLayers(seconds = 3): Promise<Layer[]> {
  const layers: Layer[] = [];
  const ring = CBaseline.named(C_SERIES.shmRing);
  if (ring instanceof CBaseline) {
    const { us } = await ring.roundTrips(8, Math.max(1000, Math.round(100_000 * seconds)));
    layers.push(layer(C_SERIES.shmRing, us));
  }
  layers.push(layer("shm connection, callbacks", await bareConnection("callback", seconds)));
  layers.push(layer("shm connection, awaits", await bareConnection("await", seconds)));
  const peer = await spawnPeer("127.0.0.1", []);
  try {
    const url = peer.urls.find((u) => u.startsWith("shm://"))!;
    const basic = await createContext({ transports: ["shm"], channels: ["basic"] });
    try {
      layers.push(layer("pipe shm+basic, metadata only", await pipeLoop(await basic.connect(url), seconds, false)));
    } finally {
      await basic.close();
    }
    const all = await createContext({});
    try {
      const pipe = await all.connect(url);
      const pair = `${pipe.transport}+${pipe.channelFor(CPU_DEVICE, CPU_DEVICE)}`;
      layers.push(layer(`README loop, 8 B tensor (${pair})`, await pipeLoop(pipe, seconds, true)));
    } finally {
      await all.close();
    }
  } finally {
    await peer.stop();
  }
  return layers;
}

const args = scriptArgs(import.meta.url);
if (args) {
  const seconds = Number(args.value("--seconds", "3"));
  const layers = await measureShmLayers(seconds);
  printResults(args, `8 B round trips over shm, layer by layer, ${seconds} s each without a break (microseconds)`, layers, [
    { header: "layer", width: 44, left: true, cell: (l) => l.name },
    { header: "count", width: 10, cell: (l) => String(l.count) },
    { header: "p50", width: 9, cell: (l) => fmt(l.p50, 2) },
    { header: "p99", width: 9, cell: (l) => fmt(l.p99, 2) },
    { header: "  p50 / layer above", width: 0, left: true, cell: (l, i) => (i > 0 ? `  ${fmt(l.p50 / layers[i - 1]!.p50, 2)}x` : "") },
  ]);
}
