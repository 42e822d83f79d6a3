import { describeChannelConformance } from "@tensorpipe/core/testing";
import { describe } from "vitest";
import { cudaSuite } from "../../cuda/test/fixtures/cuda-conformance.mjs";
import { backend } from "../src/index.js";

// Where the NIC is the ibverbs emulator, GPU memory reaches it through the
// CUDA emulator, not through a kernel module.
const emulated = process.env.TENSORPIPE_IBVERBS?.includes("ibverbs_emulator") === true;
const options = emulated ? { peerMemoryCheck: false } : {};

// The channel suite every channel passes, on GPU memory through an RDMA
// NIC: on real hardware, or on the CUDA and ibverbs emulators (the
// cuda-emulated project); skipped where neither is.
describe.skipIf(!backend.create(options).isViable().viable)("cuda-gdr on GPU memory", () => {
  describeChannelConformance({ name: "cuda-gdr", create: () => backend.create(options), ...cudaSuite });
});
