import { describeChannelConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "@tensorpipe/transport-uv";
import { describe } from "vitest";
import { cudaMemory } from "../../cuda/test/fixtures/conformance-memory.mjs";
import { backend } from "../src/index.js";

const MiB = 1024 * 1024;
// Where the NIC is the ibverbs emulator, GPU memory reaches it through the
// CUDA emulator, not through a kernel module.
const emulated = process.env.TENSORPIPE_IBVERBS?.includes("ibverbs_emulator") === true;
const options = emulated ? { peerMemoryCheck: false } : {};

// The channel suite every channel passes, on GPU memory through an RDMA
// NIC: on real hardware, or on the CUDA and ibverbs emulators (the
// cuda-emulated project); skipped where neither is.
describe.skipIf(!backend.create(options).isViable().viable)("cuda-gdr on GPU memory", () => {
  describeChannelConformance({
    name: "cuda-gdr",
    create: () => backend.create(options),
    createTransport: () => new UvTransport(),
    transportName: "uv",
    listenUrl: () => "uv://127.0.0.1:0",
    memory: cudaMemory,
    largeTensorBytes: 20 * MiB + 3,
    inFlight: 50,
  });
});
