/**
 * Workers terminated while the CUDA helper has work queued on the default
 * stream (pool jobs waiting their turn, work already on the stream): the
 * process survives, and this thread's copies on the same stream still run,
 * so a cancelled job's turn was handed on.
 */
import { setTimeout as sleep } from "node:timers/promises";
import { Worker } from "node:worker_threads";
import { allocateCuda, copyToDevice, copyToHost, cudaViability, freeCuda } from "@tensorpipe/cuda";
import { describe, expect, it } from "vitest";

const viability = cudaViability();

describe("the CUDA helper in workers", () => {
  it.skipIf(!viability.viable)("survives 10 workers terminated mid-copy, and the stream goes on", async () => {
    // From the worker's first copies to well into its loop.
    const delays = [0, 3, 7, 12, 19, 1, 5, 9, 15, 2];
    for (const delay of delays) {
      const worker = new Worker(new URL("./workers/copies.mjs", import.meta.url));
      worker.on("error", () => undefined);
      await new Promise((resolve) => worker.once("message", resolve));
      await sleep(delay);
      await worker.terminate();
    }
    const device = allocateCuda(4096);
    const source = new Uint8Array(4096).fill(9);
    const back = new Uint8Array(4096);
    await copyToDevice(device, source);
    await copyToHost(back, device);
    expect(back.every((b) => b === 9)).toBe(true);
    freeCuda(device);
  });
});
