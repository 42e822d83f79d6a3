import { describe, expect, it } from "vitest";
import { CPU_DEVICE, ErrorCode, bufferDevice, cpuBytes, cudaBuffer, deviceKey, isCpuBuffer, isCudaBuffer } from "../src/backend.js";

describe("CudaBuffer", () => {
  it("names its GPU, pointer and stream, and is not CPU memory", () => {
    const b = cudaBuffer(0x7f00_0000_1000n, 4096, { device: 1, stream: 0x55n });
    expect(b).toEqual({ device: { type: "cuda", index: 1 }, ptr: 0x7f00_0000_1000n, byteLength: 4096, stream: 0x55n });
    expect(Object.isFrozen(b) && Object.isFrozen(b.device)).toBe(true);
    expect(isCudaBuffer(b)).toBe(true);
    expect(isCpuBuffer(b)).toBe(false);
    expect(deviceKey(bufferDevice(b))).toBe("cuda:1");
    expect(cudaBuffer(1n, 0)).toEqual({ device: { type: "cuda", index: 0 }, ptr: 1n, byteLength: 0 });
    expect(isCudaBuffer(new Uint8Array(4))).toBe(false);
    expect(isCudaBuffer({ device: { type: "rocm", index: 0 }, byteLength: 1 })).toBe(false);
    expect(bufferDevice(new Float32Array(1))).toBe(CPU_DEVICE);
  });

  it("refuses what cannot be a CUDA buffer", () => {
    for (const make of [
      () => cudaBuffer(-1n, 1),
      () => cudaBuffer(2n ** 64n, 1),
      () => cudaBuffer(1 as unknown as bigint, 1),
      () => cudaBuffer(1n, -1),
      () => cudaBuffer(1n, 1.5),
      () => cudaBuffer(1n, 1, { device: -1 }),
      () => cudaBuffer(1n, 1, { stream: -2n }),
    ]) {
      expect(make).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG }));
    }
  });

  it("is refused by a CPU-only channel with the channel's name", () => {
    expect(() => cpuBytes(cudaBuffer(1n, 8), 8, "basic")).toThrow(/basic channel moves CPU memory only, got cuda/);
  });
});
