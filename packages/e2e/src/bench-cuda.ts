/**
 * GPU tensors between two processes of this machine, against the copies
 * they stand in for, measured in one run (medians of --rounds):
 * - cuda-ipc: 256 MiB from GPU 0 here into GPU 0 of the peer process,
 *   against a device-to-device copy of 256 MiB in this process (target:
 *   cuda-ipc >= 0.8x);
 * - cuda-basic: the same tensor staged through pinned host memory and a
 *   CPU channel, against a plain host round trip of it (device to pinned
 *   host, pinned host to device) in this process.
 * Before timing, one tensor per channel is checked at the peer (its first
 * and last KiB, copied back to the host there). Without a GPU it says why
 * and exits 0.
 *
 *   node packages/e2e/dist/bench-cuda.js [--size MiB] [--rounds N] [--json]
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { registerCudaBasicChannel } from "@tensorpipe/channel-cuda-basic";
import { registerCudaIpcChannel } from "@tensorpipe/channel-cuda-ipc";
import { Context, type Pipe } from "@tensorpipe/core";
import { allocateCuda, copyOnDevice, copyToDevice, copyToHost, cudaInfo, fillDevice, freeCuda, pinnedHostBuffer } from "@tensorpipe/cuda";
import { fmt, median } from "@tensorpipe/cli";
import { registerUvTransport } from "@tensorpipe/transport-uv";

const args = process.argv.slice(2);
const option = (name: string, fallback: number) => (args.includes(name) ? Number(args[args.indexOf(name) + 1]) : fallback);
const size = option("--size", 256) * 1024 * 1024;
const rounds = option("--rounds", 5);
const json = args.includes("--json");
const cuda0 = { type: "cuda", index: 0 } as const;

const info = cudaInfo();
if (!info.viability.viable) {
  console.log(json ? JSON.stringify({ skipped: info.viability.reason }) : `bench-cuda: skipped (${info.viability.reason})`);
  process.exit(0);
}

async function timed(f: () => Promise<void>): Promise<number> {
  const t0 = performance.now();
  await f();
  return (performance.now() - t0) / 1000;
}

const gbps = (bytes: number, seconds: number) => bytes / seconds / 1e9;

const src = allocateCuda(size);
const dst = allocateCuda(size);
await fillDevice(src, 90);
const pinned = pinnedHostBuffer(size);

const child = spawn(process.execPath, [fileURLToPath(new URL("./cuda-peer.js", import.meta.url)), String(size)], {
  stdio: ["pipe", "pipe", "inherit"],
});
const lines = createInterface({ input: child.stdout! });
const { url } = JSON.parse(await new Promise<string>((resolve) => lines.once("line", resolve))) as { url: string };

async function pipeWith(channel: "cuda-ipc" | "cuda-basic"): Promise<{ pipe: Pipe; context: Context }> {
  const context = new Context();
  registerUvTransport(context);
  if (channel === "cuda-ipc") registerCudaIpcChannel(context);
  else registerCudaBasicChannel(context);
  const pipe = await context.connect(url);
  if (pipe.channelFor(cuda0, cuda0) !== channel) throw new Error(`${channel} was not negotiated (got ${pipe.channelFor(cuda0, cuda0)})`);
  return { pipe, context };
}

/** One tensor to the peer and its answer ("ack", or "ok"/"bad" for a "check:<byte>"). */
async function oneWay(pipe: Pipe, metadata = ""): Promise<string> {
  await pipe.write({ metadata, tensors: [{ buffer: src, targetDevice: cuda0 }] });
  const answer = await pipe.readDescriptor();
  await pipe.read({ payloads: [], tensors: [] });
  return answer.metadata;
}

const results: Record<string, number[]> = { memcpyDtoD: [], hostRoundTrip: [], "cuda-ipc": [], "cuda-basic": [] };
const ipc = await pipeWith("cuda-ipc");
const basic = await pipeWith("cuda-basic");
try {
  // Also the warm-up: handles opened, pinned chunks allocated.
  for (const [name, { pipe }] of [["cuda-ipc", ipc], ["cuda-basic", basic]] as const) {
    const verdict = await oneWay(pipe, "check:90");
    if (verdict !== "ok") throw new Error(`${name}: the peer did not receive the bytes sent (${verdict})`);
  }
  for (let r = 0; r < rounds; r++) {
    results.memcpyDtoD!.push(gbps(size, await timed(() => copyOnDevice(dst, src, size))));
    results["cuda-ipc"]!.push(gbps(size, await timed(() => oneWay(ipc.pipe).then(() => undefined))));
    results.hostRoundTrip!.push(gbps(size, await timed(async () => {
      await copyToHost(pinned, src);
      await copyToDevice(dst, pinned);
    })));
    results["cuda-basic"]!.push(gbps(size, await timed(() => oneWay(basic.pipe).then(() => undefined))));
  }
  const back = new Uint8Array(1024);
  await copyToHost(back, dst);
  if (!back.every((b) => b === 90)) throw new Error("the device-to-device copy did not land");
} finally {
  ipc.pipe.close();
  basic.pipe.close();
  await ipc.context.close();
  await basic.context.close();
  child.stdin!.end();
  freeCuda(src);
  freeCuda(dst);
}

const m = Object.fromEntries(Object.entries(results).map(([k, v]) => [k, median(v)])) as Record<string, number>;
const out = {
  gpu: info.devices[0]!.name,
  sizeMiB: size >> 20,
  rounds,
  gbps: m,
  ratios: { "cuda-ipc/memcpyDtoD": m["cuda-ipc"]! / m.memcpyDtoD!, "cuda-basic/hostRoundTrip": m["cuda-basic"]! / m.hostRoundTrip! },
};
if (json) console.log(JSON.stringify(out));
else {
  console.log(`bench-cuda: ${out.gpu}, ${out.sizeMiB} MiB, medians of ${rounds} rounds`);
  for (const [k, v] of Object.entries(m)) console.log(`  ${k.padEnd(14)} ${fmt(v, 2)} GB/s`);
  console.log(`  cuda-ipc / device-to-device memcpy: ${fmt(out.ratios["cuda-ipc/memcpyDtoD"], 2)}x (target >= 0.8)`);
  console.log(`  cuda-basic / host round trip:       ${fmt(out.ratios["cuda-basic/hostRoundTrip"], 2)}x`);
}
