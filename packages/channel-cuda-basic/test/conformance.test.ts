import { describeChannelConformance } from "@tensorpipe/core/testing";
import { cudaViability } from "@tensorpipe/cuda";
import { describe } from "vitest";
import { cudaSuite } from "../../cuda/test/fixtures/cuda-conformance.mjs";
import { backend } from "../src/index.js";

// The channel suite every channel passes, on GPU memory: on a GPU, or on
// the emulator (the cuda-emulated project); skipped where neither is.
describe.skipIf(!cudaViability().viable)("cuda-basic on GPU memory", () => {
  describeChannelConformance({ name: "cuda-basic", create: () => backend.create({ chunkBytes: 1024 * 1024, poolChunks: 4 }), ...cudaSuite });
});
