/**
 * GPU tensors between two processes of this machine, against what a user
 * would hold them to, over a sweep of sizes, measured in one run (medians
 * of --rounds, each round timing several transfers; the README loop's
 * shape: write one tensor, read the peer's answer):
 * - cuda-ipc: a tensor from GPU 0 here into GPU 0 of the peer process,
 *   against a device-to-device copy of the same size in this process
 *   (target at 256 MiB: >= 0.9x) and against the C exchange of the same
 *   handles between two processes with no event (cuda_ipc_baseline SIZE N
 *   sender-sync, where built; target at 8 B: <= 2x its time);
 * - cuda-basic: the same tensor staged through pinned host memory and
 *   carried by its CPU channel, basic over uv (its default) and cma (the
 *   fastest on one machine: cuda-basic-cma, registered with alsoOver, which
 *   negotiation picks over cuda-basic), each against that CPU channel carrying a host
 *   buffer of the same size (target from 16 MiB up: >= 0.8x); a plain host
 *   round trip (device to pinned host and back, in this process) is shown
 *   beside them.
 * Before timing each size, one tensor per channel is checked at the peer
 * (its first and last KiB, copied back to the host there). Without a GPU it
 * says why and exits 0.
 *
 *   node packages/bench/dist/scripts/bench-cuda.js [--sizes 8,4K,...,256M] [--rounds N] [--json]
 */
import { execFileSync, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { CmaChannelContext, registerCmaChannel } from "@tensorpipe/channel-cma";
import { registerCudaBasicChannel } from "@tensorpipe/channel-cuda-basic";
import { registerCudaIpcChannel } from "@tensorpipe/channel-cuda-ipc";
import { CPU_DEVICE, Context, type Pipe } from "@tensorpipe/core";
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
const host = new Uint8Array(capacity).fill(90);

const child = spawn(process.execPath, [fileURLToPath(new URL("../../dist/scripts/cuda-peer.js", import.meta.url)), String(capacity)], {
  stdio: ["pipe", "pipe", "inherit"],
});
const lines = createInterface({ input: child.stdout! });
const peer = JSON.parse(await new Promise<string>((resolve) => lines.once("line", resolve))) as { url: string; cma: boolean };

type Channel = "cuda-ipc" | "cuda-basic" | "cuda-basic+cma" | "basic" | "cma";

/** The CPU channel each cuda-basic series stages through, held against it. */
const STAGED_OVER: Partial<Record<Channel, Channel>> = { "cuda-basic": "basic", "cuda-basic+cma": "cma" };

async function pipeWith(channel: Channel): Promise<{ pipe: Pipe; context: Context }> {
  const context = new Context();
  registerUvTransport(context);
  if (channel === "cuda-ipc") registerCudaIpcChannel(context);
  else if (channel === "cuda-basic") registerCudaBasicChannel(context);
  else if (channel === "cuda-basic+cma") registerCudaBasicChannel(context, { alsoOver: { cma: new CmaChannelContext() } });
  else if (channel === "basic") registerBasicChannel(context);
  else registerCmaChannel(context);
  const pipe = await context.connect(peer.url);
  const [device, expected] = channel === "basic" || channel === "cma" ? [CPU_DEVICE, channel] : [cuda0, channel.replace("+", "-")];
  const negotiated = pipe.channelFor(device, device);
  if (negotiated !== expected) throw new Error(`${channel} was not negotiated (got ${negotiated})`);
  return { pipe, context };
}

/** One tensor to the peer and its answer ("ack", or "ok"/"bad" for a "check:<byte>"): from GPU 0, or for a CPU channel from host memory. */
async function oneWay(channel: Channel, size: number, metadata = ""): Promise<string> {
  const pipe = pipes.get(channel)!.pipe;
  const cpu = channel === "basic" || channel === "cma";
  const tensor = cpu ? { buffer: host.subarray(0, size), targetDevice: CPU_DEVICE } : { buffer: cudaSlice(src, 0, size), targetDevice: cuda0 };
  await pipe.write({ metadata, tensors: [tensor] });
  const answer = await pipe.readDescriptor();
  await pipe.read({ payloads: [], tensors: [] });
  return answer.metadata;
}

const channels: Channel[] = ["cuda-ipc", "cuda-basic", "basic", ...(peer.cma ? (["cuda-basic+cma", "cma"] as const) : [])];
const pipes = new Map<Channel, { pipe: Pipe; context: Context }>();
for (const c of channels) pipes.set(c, await pipeWith(c));

/** The C exchange: median microseconds of `count` transfers of `size` by cuda_ipc_baseline with no event, or undefined where it is not built. */
const baseline = fileURLToPath(new URL("../../build/Release/cuda_ipc_baseline", import.meta.url));
function cExchange(size: number, count: number): number | undefined {
  if (!existsSync(baseline)) return undefined;
  const out = JSON.parse(execFileSync(baseline, [String(size), String(count), "sender-sync"], { encoding: "utf8" })) as { us: number[] };
  return median(out.us);
}

/** What each series does once, for `size` bytes. */
const series: Record<string, (size: number) => Promise<unknown>> = {
  memcpyDtoD: (size) => copyOnDevice(cudaSlice(dst, 0, size), cudaSlice(src, 0, size), size),
  hostRoundTrip: async (size) => {
    await copyToHost(pinned.subarray(0, size), cudaSlice(src, 0, size));
    await copyToDevice(cudaSlice(dst, 0, size), pinned.subarray(0, size));
  },
  ...Object.fromEntries(channels.map((c) => [c, (size: number) => oneWay(c, size)])),
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
      const verdict = await oneWay(c, size, "check:90");
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
    const c = cExchange(size, n * rounds);
    if (c !== undefined) us.cExchange = c;
    const gbps = Object.fromEntries(Object.entries(us).map(([k, v]) => [k, size / v / 1000]));
    // Each a speed ratio: higher is better.
    const ratios: Record<string, number> = { "cuda-ipc/memcpyDtoD": gbps["cuda-ipc"]! / gbps.memcpyDtoD! };
    if (c !== undefined) ratios["cuda-ipc/cExchange"] = gbps["cuda-ipc"]! / gbps.cExchange!;
    for (const [staged, cpu] of Object.entries(STAGED_OVER)) if (pipes.has(staged as Channel)) ratios[`${staged}/${cpu}`] = gbps[staged]! / gbps[cpu]!;
    ratios["cuda-basic/hostRoundTrip"] = gbps["cuda-basic"]! / gbps.hostRoundTrip!;
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

/** The issue's targets, each read from this run. */
interface Target {
  what: string;
  value: number;
  target: string;
  met: boolean;
}
const targets: Target[] = [];
const row = (bytes: number) => rows.find((r) => r.bytes === bytes);
const at256 = row(256 * MiB);
if (at256) {
  const v = at256.ratios["cuda-ipc/memcpyDtoD"]!;
  targets.push({ what: "cuda-ipc 256 MiB / device-to-device copy", value: v, target: ">= 0.9x", met: v >= 0.9 });
}
const at8 = row(8);
if (at8?.us.cExchange !== undefined) {
  const v = at8.us["cuda-ipc"]! / at8.us.cExchange;
  targets.push({ what: "cuda-ipc 8 B time / C exchange's", value: v, target: "<= 2x", met: v <= 2 });
}
for (const r of rows.filter((x) => x.bytes >= 16 * MiB)) {
  for (const [staged, cpu] of Object.entries(STAGED_OVER)) {
    const v = r.ratios[`${staged}/${cpu}`];
    if (v !== undefined) targets.push({ what: `${staged} ${r.size} / ${cpu}`, value: v, target: ">= 0.8x", met: v >= 0.8 });
  }
}

const out = { gpu: info.devices[0]!.name, driverVersion: info.driverVersion, rounds, channels, rows, targets };
if (json) console.log(JSON.stringify(out));
else {
  const names = Object.keys(rows[0]?.us ?? series);
  console.log(`bench-cuda: ${out.gpu} (driver API ${out.driverVersion}), two processes, medians of ${rounds} rounds; GB/s (us per transfer)`);
  console.log(["size".padEnd(8), ...names.map((n) => n.padStart(20))].join(""));
  for (const r of rows) {
    const cells = names.map((n) => `${fmt(r.gbps[n]!, 2)} (${fmt(r.us[n]!, 1)})`.padStart(20));
    console.log([r.size.padEnd(8), ...cells].join(""));
  }
  console.log("ratios (speed, higher is better)");
  console.log(["size".padEnd(8), ...Object.keys(rows[0]?.ratios ?? {}).map((k) => k.padStart(28))].join(""));
  for (const r of rows) console.log([r.size.padEnd(8), ...Object.values(r.ratios).map((v) => `${fmt(v, 2)}x`.padStart(28))].join(""));
  console.log("targets (issue 40)");
  for (const t of targets) console.log(`  ${t.what.padEnd(44)} ${`${fmt(t.value, 2)}x`.padStart(8)}  (target ${t.target}): ${t.met ? "met" : "NOT MET"}`);
}
