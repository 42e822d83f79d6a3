import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { describe, expect, it, onTestFinished } from "vitest";

const bench = fileURLToPath(new URL("../../bench/dist/scripts/bench-cuda.js", import.meta.url));
const report = fileURLToPath(new URL("../../bench/dist/scripts/gpu-report.js", import.meta.url));

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
      expect(Object.keys(row.ratios).sort()).toEqual([
        "cuda-basic+cma/cma",
        "cuda-basic/basic",
        "cuda-basic/hostRoundTrip",
        "cuda-ipc/cExchange",
        "cuda-ipc/memcpyDtoD",
      ]);
      for (const v of [...Object.values(row.gbps), ...Object.values(row.ratios)]) expect(v).toBeGreaterThan(0);
    }
    expect(out.targets.map((t: { what: string }) => t.what)).toEqual([
      "cuda-ipc 8 B time / C exchange's",
      "cuda-basic 16 MiB / basic",
      "cuda-basic+cma 16 MiB / cma",
    ]);

    // What device-gpu-checks.sh's report step makes of it, beside a bench run's ratios, with the tests' step missing.
    const dir = mkdtempSync(join(tmpdir(), "tp-gpu-report-"));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, "bench-cuda.txt"), r.stdout);
    writeFileSync(
      join(dir, "bench.json"),
      JSON.stringify({ sizes: [8, 64 << 20], ratios: { "shm+cma 64 MiB GB/s / memcpy": 0.85, "cma (C) 64 MiB GB/s / memcpy": 0.9 } }),
    );
    const byThreads = {
      size: 64 << 20,
      rounds: 3,
      cores: 16,
      rows: [
        { threads: 8, copiers: 8, memcpy: 45, memcpyC: 50, cmaC: 30, shmCma: 28 },
        { copiers: 4, shmCma: 20 },
      ],
      ratios: {
        "cma (C) best / memcpy best": 0.6,
        "shm+cma best / memcpy best": 0.56,
        "shm+cma default / memcpy best": 0.4,
        "shm+cma best / cma (C) best": 0.93,
      },
    };
    writeFileSync(join(dir, "cma-threads.txt"), `a warning first\n${JSON.stringify(byThreads)}\n`);
    const made = spawnSync(process.execPath, [report, dir, "--date", "2026-01-02"], { encoding: "utf8" });
    expect(made.status).toBe(0);
    expect(made.stdout.trim()).toBe(join(dir, "2026-01-02-tensorpipe.md"));
    const page = readFileSync(join(dir, "2026-01-02-tensorpipe.md"), "utf8");
    expect(page).toMatch(/^# GPU and \d+-core figures, 2026-01-02\n/);
    expect(page).toContain("| GPU | TensorPipe CUDA emulator 0, driver API");
    expect(page).toMatch(/\| cuda-basic\+cma 16 MiB \/ cma \| [\d.]+x \| >= 0\.8x \| (met|NOT MET) \|/);
    expect(page).toContain("| shm+cma 64 MiB GB/s / memcpy | 0.85x |");
    expect(page).toContain("Target: shm+cma >= 0.8x memcpy at 64 MiB: met.");
    expect(page).toContain("| 8 | 8 | 45.00 | 50.00 | 30.00 | 28.00 |");
    expect(page).toContain("| default | 4 |  |  |  | 20.00 |");
    expect(page).toContain("| shm+cma default / memcpy best | 0.40x |");
    expect(page).toContain("The kernel's copy is the limit: cma (C) at its best is 0.60x memcpy at its best");
    expect(page).toContain("(missing: the tests step left no output");
  });
});
