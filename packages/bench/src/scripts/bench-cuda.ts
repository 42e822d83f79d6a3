/**
 * GPU tensors between two processes of this machine, against the copies
 * they stand in for, over a sweep of sizes, measured in one run (medians of
 * --rounds, each round timing several transfers):
 * - cuda-ipc: a tensor from GPU 0 here into GPU 0 of the peer process and
 *   the peer's answer, against a device-to-device copy of the same size in
 *   this process (target at 256 MiB: cuda-ipc >= 0.8x);
 * - cuda-basic: the same tensor staged through pinned host memory and
 *   carried by its CPU channel, basic over uv (its default) and cma (the
 *   fastest on one machine), against a plain host round trip of it (device
 *   to pinned host, pinned host to device) in this process (target at
 *   256 MiB: >= 0.8x).
 * Before timing each size, one tensor per channel is checked at the peer
 * (its first and last KiB, copied back to the host there). Without a GPU it
 * says why and exits 0.
 *
 *   node packages/bench/dist/scripts/bench-cuda.js [--sizes 8,4K,...,256M] [--rounds N] [--json]
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { CmaChannelContext } from "@tensorpipe/channel-cma";
import { registerCudaBasicChannel } from "@tensorpipe/channel-cuda-basic";
import { registerCudaIpcChannel } from "@tensorpipe/channel-cuda-ipc";
import { Context, type Pipe } from "@tensorpipe/core";
import { allocateCuda, copyOnDevice, copyToDevice, copyToHost, cudaInfo, cudaSlice, fillDevice, freeCuda, pinnedHostBuffer } from "@tensorpipe/cuda";
import { fmt, median, parseSize, sizeLabel } from "../index.js";
import { registerUvTransport } from "@tensorpipe/transport-uv";

const args = process.argv.slice(2);
const option = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
const sizes = (option("--sizes") ?? "8,4K,64K,1M,16M,64M,256M").split(",").map(parseSize);
const rounds = Number(option("--rounds") ?? 5);
const json = args.includes("--json");
const cuda0 = { type: "cuda", index: 0 } as const;
const MiB = 1024 * 1024;

const info = cudaInfo();
if (!info.viability.viable) {
  console.log(json ? JSON.stringify({ skipped: info.viability.reason }) : `bench-cuda: skipped (${info.viability.reason})`);
  process.exit(0);
}

/** Transfers per round: enough that small sizes are not one timer tick. */
const perRound = (size: number) => (size <= 64 * 1024 ? 200 : size <= MiB ? 50 : size <= 16 * MiB ? 10 : 3);

const capacity = Math.max(...sizes);
const src = allocateCuda(capacity);
const dst = allocateCuda(capacity);
await fillDevice(src, 90);
const pinned = pinnedHostBuffer(capacity);

const child = spawn(process.execPath, [fileURLToPath(new URL("../../dist/scripts/cuda-peer.js", import.meta.url)), String(capacity)], {
  stdio: ["pipe", "pipe", "inherit"],
});
const lines = createInterface({ input: child.stdout! });
const urls = JSON.parse(await new Promise<string>((resolve) => lines.once("line", resolve))) as { url: string; cmaUrl: string | null };

type Channel = "cuda-ipc" | "cuda-basic" | "cuda-basic+cma";

async function pipeWith(channel: Channel): Promise<{ pipe: Pipe; context: Context }> {
  const context = new Context();
  registerUvTransport(context);
  if (channel === "cuda-ipc") registerCudaIpcChannel(context);
  else if (channel === "cuda-basic") registerCudaBasicChannel(context);
  else registerCudaBasicChannel(context, { cpuChannel: new CmaChannelContext() });
  const pipe = await context.connect(channel === "cuda-basic+cma" ? urls.cmaUrl! : urls.url);
  const negotiated = pipe.channelFor(cuda0, cuda0);
  if (negotiated !== channel.replace("+cma", "")) throw new Error(`${channel} was not negotiated (got ${negotiated})`);
  return { pipe, context };
}

/** One tensor to the peer and its answer ("ack", or "ok"/"bad" for a "check:<byte>"). */
async function oneWay(pipe: Pipe, size: number, metadata = ""): Promise<string> {
  await pipe.write({ metadata, tensors: [{ buffer: cudaSlice(src, 0, size), targetDevice: cuda0 }] });
  const answer = await pipe.readDescriptor();
  await pipe.read({ payloads: [], tensors: [] });
  return answer.metadata;
}

const channels: Channel[] = ["cuda-ipc", "cuda-basic", ...(urls.cmaUrl ? (["cuda-basic+cma"] as const) : [])];
const pipes = new Map<Channel, { pipe: Pipe; context: Context }>();
for (const c of channels) pipes.set(c, await pipeWith(c));

/** What each series does once, for `size` bytes. */
const series: Record<string, (size: number) => Promise<unknown>> = {
  memcpyDtoD: (size) => copyOnDevice(cudaSlice(dst, 0, size), cudaSlice(src, 0, size), size),
  hostRoundTrip: async (size) => {
    await copyToHost(pinned.subarray(0, size), cudaSlice(src, 0, size));
    await copyToDevice(cudaSlice(dst, 0, size), pinned.subarray(0, size));
  },
  ...Object.fromEntries(channels.map((c) => [c, (size: number) => oneWay(pipes.get(c)!.pipe, size)])),
};

interface Row {
  bytes: number;
  size: string;
  /** Median microseconds per transfer. */
  us: Record<string, number>;
  gbps: Record<string, number>;
  ratios: Record<string, number>;
}
const rows: Row[] = [];
try {
  for (const size of sizes) {
    // Also the warm-up: handles opened, pinned chunks allocated.
    for (const c of channels) {
      const verdict = await oneWay(pipes.get(c)!.pipe, size, "check:90");
      if (verdict !== "ok") throw new Error(`${c}: the peer did not receive the ${sizeLabel(size)} sent (${verdict})`);
    }
    const samples: Record<string, number[]> = Object.fromEntries(Object.keys(series).map((k) => [k, []]));
    const n = perRound(size);
    for (let r = 0; r < rounds; r++) {
      for (const [name, once] of Object.entries(series)) {
        const t0 = performance.now();
        for (let i = 0; i < n; i++) await once(size);
        samples[name]!.push(((performance.now() - t0) * 1000) / n);
      }
    }
    const us = Object.fromEntries(Object.entries(samples).map(([k, v]) => [k, median(v)]));
    const gbps = Object.fromEntries(Object.entries(us).map(([k, v]) => [k, size / v / 1000]));
    const ratios: Record<string, number> = { "cuda-ipc/memcpyDtoD": gbps["cuda-ipc"]! / gbps.memcpyDtoD! };
    for (const c of channels.slice(1)) ratios[`${c}/hostRoundTrip`] = gbps[c]! / gbps.hostRoundTrip!;
    rows.push({ bytes: size, size: sizeLabel(size), us, gbps, ratios });
  }
  const back = new Uint8Array(1024);
  await copyToHost(back, dst);
  if (!back.every((b) => b === 90)) throw new Error("the device-to-device copy did not land");
} finally {
  for (const { pipe, context } of pipes.values()) {
    pipe.close();
    await context.close();
  }
  child.stdin!.end();
  freeCuda(src);
  freeCuda(dst);
}

const out = { gpu: info.devices[0]!.name, driverVersion: info.driverVersion, rounds, channels, rows };
if (json) console.log(JSON.stringify(out));
else {
  const names = Object.keys(series);
  console.log(`bench-cuda: ${out.gpu} (driver API ${out.driverVersion}), two processes, medians of ${rounds} rounds; GB/s (us per transfer)`);
  console.log(["size".padEnd(8), ...names.map((n) => n.padStart(20))].join(""));
  for (const row of rows) {
    const cells = names.map((n) => `${fmt(row.gbps[n]!, 2)} (${fmt(row.us[n]!, 1)})`.padStart(20));
    console.log([row.size.padEnd(8), ...cells].join(""));
  }
  console.log("ratios");
  console.log(["size".padEnd(8), ...Object.keys(rows[0]?.ratios ?? {}).map((k) => k.padStart(32))].join(""));
  for (const row of rows) console.log([row.size.padEnd(8), ...Object.values(row.ratios).map((v) => `${fmt(v, 2)}x`.padStart(32))].join(""));
  const last = rows.at(-1);
  if (last) {
    console.log(`at ${last.size}: cuda-ipc / device-to-device memcpy ${fmt(last.ratios["cuda-ipc/memcpyDtoD"]!, 2)}x (target >= 0.8)`);
    for (const c of channels.slice(1)) console.log(`at ${last.size}: ${c} / host round trip ${fmt(last.ratios[`${c}/hostRoundTrip`]!, 2)}x (target >= 0.8)`);
  }
}
