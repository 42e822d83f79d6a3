/**
 * One build of the repository measured the way a user's tuned loop runs
 * it, for compare-builds.ts: the library and `tensorpipe peer` of the
 * checkout at `--root` (built), an 8 B round trip's p50 and a 64 MiB
 * stream's GB/s over each transport x channel pair given, printed as JSON.
 * It uses only what every build has: the CLI's createContext() and peer,
 * and the Pipe's write, readDescriptor, read and readMessage.
 *
 *   node packages/bench/dist/scripts/build-probe.js --root DIR --pairs shm+cma,uv+basic
 */
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import type { Context, Pipe } from "@tensorpipe/core";
import { jsonChild } from "../spawn-peer.js";
import { median } from "../stats.js";
import { scriptArgs } from "./script.js";

/** What one build did over one pair. */
export interface ProbeResult {
  pair: string;
  /** The 8 B round trip's median, in microseconds. */
  roundTripUs: number;
  /** 64 MiB messages streamed, in GB/s. */
  gbps: number;
}

interface Build {
  createContext(choice: { transports: string[]; channels: string[] }): Promise<Context>;
  CPU_DEVICE: { type: string; index: number };
}

const ROUND_TRIP_WARM = 2000;
const ROUND_TRIPS = 5000;
const STREAM_BYTES = 64 * 1024 * 1024;
const STREAM_MESSAGES = 8;
/** Sink messages in flight at once, as a streaming writer keeps them. */
const IN_FLIGHT = 2;

async function roundTrip(pipe: Pipe, cpu: Build["CPU_DEVICE"]): Promise<number> {
  const message = { metadata: "", tensors: [{ buffer: new Uint8Array(8), targetDevice: cpu }] };
  const allocation = { payloads: [], tensors: [{ buffer: new Uint8Array(8) }] };
  const once = async () => {
    const written = pipe.write(message);
    await pipe.readDescriptor();
    await pipe.read(allocation);
    await written;
  };
  for (let i = 0; i < ROUND_TRIP_WARM; i++) await once();
  const us: number[] = [];
  for (let i = 0; i < ROUND_TRIPS; i++) {
    const start = performance.now();
    await once();
    us.push((performance.now() - start) * 1000);
  }
  return median(us);
}

async function stream(pipe: Pipe, cpu: Build["CPU_DEVICE"]): Promise<number> {
  const message = { metadata: "sink", tensors: [{ buffer: new Uint8Array(STREAM_BYTES).fill(7), targetDevice: cpu }] };
  const run = async (count: number) => {
    const writes: Promise<void>[] = [];
    let acked = 0;
    for (let i = 0; i < count; i++) {
      if (i - acked >= IN_FLIGHT) {
        await pipe.readMessage();
        acked++;
      }
      writes.push(pipe.write(message));
    }
    for (; acked < count; acked++) await pipe.readMessage();
    await Promise.all(writes);
  };
  await run(2);
  const start = performance.now();
  await run(STREAM_MESSAGES);
  return (STREAM_MESSAGES * STREAM_BYTES) / ((performance.now() - start) * 1e6);
}

/** Measures each pair of `pairs` with the build at `root`. */
export async function probe(root: string, pairs: readonly string[]): Promise<ProbeResult[]> {
  const cli = pathToFileURL(join(root, "packages/cli/dist/"));
  const build: Build = {
    ...((await import(new URL("backends.js", cli).href)) as Pick<Build, "createContext">),
    CPU_DEVICE: ((await import(pathToFileURL(join(root, "packages/core/dist/index.js")).href)) as Pick<Build, "CPU_DEVICE">).CPU_DEVICE,
  };
  const peer = await jsonChild<{ urls: string[] }>([process.execPath, new URL("main.js", cli).pathname, "peer"]);
  const out: ProbeResult[] = [];
  try {
    for (const pair of pairs) {
      const [transport, channel] = pair.split("+") as [string, string];
      const context = await build.createContext({ transports: [transport], channels: [channel] });
      try {
        const pipe = await context.connect(peer.info.urls.find((u) => u.startsWith(`${transport}://`))!);
        out.push({ pair, roundTripUs: await roundTrip(pipe, build.CPU_DEVICE), gbps: await stream(pipe, build.CPU_DEVICE) });
      } finally {
        await context.close();
      }
    }
  } finally {
    await peer.stop();
  }
  return out;
}

const args = scriptArgs(import.meta.url);
if (args) {
  const root = args.value("--root", "");
  if (!root) throw new Error("usage: build-probe.js --root DIR [--pairs shm+cma,uv+basic]");
  const pairs = args.value("--pairs", "shm+cma,shm+basic,shm+mpt,uv+cma,uv+basic,uv+mpt").split(",");
  process.stdout.write(`${JSON.stringify(await probe(root, pairs))}\n`);
}
