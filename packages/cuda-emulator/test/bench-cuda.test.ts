import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const bench = fileURLToPath(new URL("../../bench/dist/scripts/bench-cuda.js", import.meta.url));

// The GPU benchmark's whole path (two processes, every CUDA channel, the
// bytes checked at the peer for each size) on the emulated GPUs; its
// figures measure host memory here, not a GPU, and are not looked at
// beyond being there.
describe("bench-cuda on the emulator", () => {
  it("moves and checks tensors of each size over cuda-ipc, cuda-basic and the CPU channels it stages through, and prints every figure and target", () => {
    const r = spawnSync(process.execPath, [bench, "--sizes", "8,16M", "--rounds", "1", "--json"], { encoding: "utf8", env: process.env, timeout: 60_000 });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout.trim().split("\n").at(-1)!);
    expect(out).toMatchObject({ gpu: "TensorPipe CUDA emulator 0", rounds: 1, channels: ["cuda-ipc", "cuda-basic", "basic", "cuda-basic+cma", "cma"] });
    expect(out.rows.map((row: { size: string }) => row.size)).toEqual(["8 B", "16 MiB"]);
    for (const row of out.rows) {
      expect(Object.keys(row.gbps).sort()).toEqual(["basic", "cExchange", "cma", "cuda-basic", "cuda-basic+cma", "cuda-ipc", "hostRoundTrip", "memcpyDtoD"]);
      expect(Object.keys(row.ratios).sort()).toEqual(["cuda-basic+cma/cma", "cuda-basic/basic", "cuda-basic/hostRoundTrip", "cuda-ipc/cExchange", "cuda-ipc/memcpyDtoD"]);
      for (const v of [...Object.values(row.gbps), ...Object.values(row.ratios)]) expect(v).toBeGreaterThan(0);
    }
    expect(out.targets.map((t: { what: string }) => t.what)).toEqual([
      "cuda-ipc 8 B time / C exchange's",
      "cuda-basic 16 MiB / basic",
      "cuda-basic+cma 16 MiB / cma",
    ]);
  });
});
