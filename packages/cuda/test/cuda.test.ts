import { ErrorCode, cudaBuffer } from "@tensorpipe/core/backend";
import { hasPattern, patterned } from "@tensorpipe/core/testing";
import { describe, expect, it } from "vitest";
import {
  allocateCuda,
  allocationOf,
  copyOnDevice,
  copyToDevice,
  copyToHost,
  createStream,
  cudaInfo,
  cudaSlice,
  cudaViability,
  destroyStream,
  fillDevice,
  freeCuda,
  pinnedHostBuffer,
  pointerDevice,
  streamReady,
} from "../src/index.js";

const viability = cudaViability();
const gpu = viability.viable;
if (!gpu) console.log(`GPU tests skipped: ${viability.reason}`);
const MiB = 1024 * 1024;

describe("cuda helper without a GPU", () => {
  it.skipIf(gpu)("says why CUDA is not usable, and every call fails with that reason", () => {
    expect(viability.viable).toBe(false);
    // This machine has the toolkit but no driver: the addon loaded and dlopen said why.
    expect(viability.reason).toMatch(/no CUDA driver: libcuda\.so\.1|the CUDA driver sees no GPU|did not start/);
    expect(cudaInfo().devices).toEqual([]);
    const fake = cudaBuffer(1n << 40n, 16);
    for (const f of [() => allocateCuda(16), () => pinnedHostBuffer(16), () => createStream(0), () => pointerDevice(1n), () => allocationOf(fake)]) {
      expect(f).toThrow(expect.objectContaining({ code: ErrorCode.NOT_VIABLE, message: expect.stringContaining(viability.reason!) }));
    }
    return expect(streamReady()).rejects.toMatchObject({ code: ErrorCode.NOT_VIABLE });
  });
});

describe.skipIf(!gpu)("cuda helper on a GPU", () => {
  it("lists the GPUs with their bus ids and UUIDs", () => {
    const { devices, driverVersion } = cudaInfo();
    expect(devices.length).toBeGreaterThan(0);
    expect(driverVersion).toBeGreaterThan(11000);
    for (const d of devices)
      expect(d).toMatchObject({ name: expect.any(String), pciBusId: expect.stringMatching(/:/), uuid: expect.stringMatching(/^[0-9a-f]{32}$/) });
  });

  it("copies host -> device -> device -> host, through pinned memory and on a stream", async () => {
    const a = allocateCuda(8 * MiB);
    const b = allocateCuda(8 * MiB);
    const stream = createStream(0);
    try {
      expect(pointerDevice(a.ptr)).toBe(0);
      await copyToDevice(a, patterned(8 * MiB, 3), { stream });
      await copyOnDevice(b, a, 8 * MiB);
      const pinned = pinnedHostBuffer(8 * MiB);
      await copyToHost(pinned, b);
      expect(hasPattern(pinned, 3)).toBe(true);
      await fillDevice(cudaSlice(b, MiB, 10), 7);
      const back = new Uint8Array(MiB + 11);
      await copyToHost(back, b);
      expect([...back.subarray(MiB - 1, MiB + 11)]).toEqual([patterned(8 * MiB, 3)[MiB - 1], ...Array(10).fill(7), patterned(8 * MiB, 3)[MiB + 10]]);
    } finally {
      destroyStream(stream);
      freeCuda(a);
      freeCuda(b);
    }
  });

  it("names the allocation behind a pointer, with an id a new allocation does not reuse", () => {
    const a = allocateCuda(3 * MiB);
    const first = allocationOf(cudaSlice(a, MiB, 16));
    freeCuda(a);
    const b = allocateCuda(3 * MiB);
    try {
      expect(first).toMatchObject({ base: a.ptr, size: expect.any(Number) });
      expect(first.size).toBeGreaterThanOrEqual(3 * MiB);
      expect(allocationOf(b).bufferId).not.toBe(first.bufferId);
      expect(() => allocationOf(cudaBuffer(12345n, 1))).toThrow(expect.objectContaining({ code: ErrorCode.SYSTEM }));
    } finally {
      freeCuda(b);
    }
  });

  it("waits for the work queued on a stream so far", async () => {
    const stream = createStream(0);
    const a = allocateCuda(64 * MiB);
    try {
      const filled = fillDevice(a, 5, 64 * MiB, { stream });
      await streamReady(stream);
      const back = new Uint8Array(16);
      await copyToHost(back, cudaSlice(a, 64 * MiB - 16, 16), { stream });
      expect([...back]).toEqual(Array(16).fill(5));
      await filled;
    } finally {
      destroyStream(stream);
      freeCuda(a);
    }
  });

  it("queues work on a stream in the order it is asked for, and a ready stream has done it all", async () => {
    const stream = createStream(0);
    const other = createStream(0);
    const a = allocateCuda(16 * MiB);
    try {
      const fills = [1, 2, 3, 4].map((v) => fillDevice(a, v, 16 * MiB, { stream }));
      await streamReady(stream);
      // Read on another stream, which keeps no order with the first: only the ready wait stands between.
      const back = new Uint8Array(16 * MiB);
      await copyToHost(back, a, { stream: other });
      expect(back.every((v) => v === 4)).toBe(true);
      await Promise.all(fills);
    } finally {
      destroyStream(stream);
      destroyStream(other);
      freeCuda(a);
    }
  });

  it("reports driver errors with the CUDA error's name", () => {
    expect(() => allocateCuda(2 ** 52)).toThrow(expect.objectContaining({ code: ErrorCode.SYSTEM, errnoName: "CUDA_ERROR_OUT_OF_MEMORY" }));
    expect(() => allocateCuda(16, { device: 99 })).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG }));
    expect(pointerDevice(12345n)).toBe(-1);
  });

  it("refuses copies that do not fit", async () => {
    const a = allocateCuda(16);
    try {
      await expect(copyToDevice(a, new Uint8Array(17))).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      await expect(copyToHost(new Uint8Array(17), a)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    } finally {
      freeCuda(a);
    }
  });
});
