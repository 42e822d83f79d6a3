import { fileURLToPath } from "node:url";
import { defineProject } from "vitest/config";

/**
 * The GPU tests of the CUDA packages, run again on the emulated driver
 * (their plain runs skip on machines without a GPU), the emulator's own
 * checks, and a short run of bench-cuda.
 */
export default defineProject({
  test: {
    name: "cuda-emulated",
    include: [
      "../cuda/test/**/*.test.ts",
      "../channel-cuda-basic/test/**/*.test.ts",
      "../channel-cuda-ipc/test/**/*.test.ts",
      "../channel-cuda-gdr/test/conformance.test.ts",
      "test/**/*.test.ts",
    ],
    env: {
      TENSORPIPE_CUDA_DRIVER: fileURLToPath(new URL("./build/Release/libtensorpipe_cuda_emulator.so", import.meta.url)),
      TENSORPIPE_IBVERBS: fileURLToPath(new URL("./build/Release/libtensorpipe_ibverbs_emulator.so", import.meta.url)),
    },
    testTimeout: 60_000,
  },
});
