import { describeChannelConformance } from "@tensorpipe/core/testing";
import { cudaViability } from "@tensorpipe/cuda";
import { UvTransport } from "@tensorpipe/transport-uv";
import { describe } from "vitest";
import { cudaMemory } from "../../cuda/test/fixtures/conformance-memory.mjs";
import { backend } from "../src/index.js";

const MiB = 1024 * 1024;

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
