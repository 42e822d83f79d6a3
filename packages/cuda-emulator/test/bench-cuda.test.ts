import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const bench = fileURLToPath(new URL("../../e2e/dist/bench-cuda.js", import.meta.url));

// The GPU benchmark's whole path (two processes, both CUDA channels, the
// bytes checked at the peer) on the emulated GPUs; its figures measure host
// memory here, not a GPU, and are not looked at beyond being there.
describe("bench-cuda on the emulator", () => {
  it("moves and checks a tensor over cuda-ipc and cuda-basic, and prints every figure", () => {
    const r = spawnSync(process.execPath, [bench, "--size", "16", "--rounds", "2", "--json"], { encoding: "utf8", env: process.env, timeout: 60_000 });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
    expect(out).toMatchObject({ gpu: "TensorPipe CUDA emulator 0", sizeMiB: 16, rounds: 2 });
    expect(Object.keys(out.gbps).sort()).toEqual(["cuda-basic", "cuda-ipc", "hostRoundTrip", "memcpyDtoD"]);
    for (const v of [...Object.values(out.gbps), ...Object.values(out.ratios)]) expect(v).toBeGreaterThan(0);
  });
});
