import { describeChannelConformance } from "@tensorpipe/core/testing";
import { cudaViability } from "@tensorpipe/cuda";
import { describe } from "vitest";
import { cudaSuite } from "../../cuda/test/fixtures/cuda-conformance.mjs";
import { backend } from "../src/index.js";

// The channel suite every channel passes, on GPU memory, with the
// connecting end in a second process: on a GPU, or on the emulator (the
// cuda-emulated project); skipped where neither is.
describe.skipIf(!cudaViability().viable)("cuda-ipc on GPU memory", () => {
  describeChannelConformance({
    name: "cuda-ipc",
    create: () => backend.create(),
    ...cudaSuite,
    peerProcess: new URL("./fixtures/conformance-peer.mjs", import.meta.url),
  });
});
