import { type ConformanceMemory, describeChannelConformance } from "@tensorpipe/core/testing";
import { type CudaBuffer, allocateCuda, copyToDevice, copyToHost, cudaViability, freeCuda } from "@tensorpipe/cuda";
import { UvTransport } from "@tensorpipe/transport-uv";
import { describe } from "vitest";
import { backend } from "../src/index.js";

const MiB = 1024 * 1024;

/** GPU 0's memory, filled and checked through copies to and from the host. */
const cudaMemory: ConformanceMemory = {
  device: { type: "cuda", index: 0 },
  async from(host) {
    const buffer = allocateCuda(host.length);
    if (host.length > 0) await copyToDevice(buffer, host);
    return buffer;
  },
  alloc: (bytes) => allocateCuda(bytes),
  async toHost(buffer, bytes) {
    const host = new Uint8Array(bytes);
    if (bytes > 0) await copyToHost(host, buffer as CudaBuffer);
    return host;
  },
  free: (buffer) => freeCuda(buffer as CudaBuffer),
};

// The channel suite every channel passes, on GPU memory: on a GPU, or on
// the emulator (the cuda-emulated project); skipped where neither is.
describe.skipIf(!cudaViability().viable)("cuda-basic on GPU memory", () => {
  describeChannelConformance({
    name: "cuda-basic",
    create: () => backend.create({ chunkBytes: MiB, poolChunks: 4 }),
    createTransport: () => new UvTransport(),
    transportName: "uv",
    listenUrl: () => "uv://127.0.0.1:0",
    memory: cudaMemory,
    largeTensorBytes: 20 * MiB + 3,
    inFlight: 50,
  });
});
