import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const baseline = fileURLToPath(new URL("../../bench/build/Release/cuda_ipc_baseline", import.meta.url));

// The C exchange bench-cuda's cuda-ipc figures are read against, in each of
// its modes, on the emulated GPUs: two processes, handles across, a copy
// per transfer and an answer. Its figures here measure host memory.
describe("cuda_ipc_baseline on the emulator", () => {
  it.each(["event", "fresh-event", "sender-sync", "local"])("times transfers in %s mode and the driver calls", (mode) => {
    const r = spawnSync(baseline, ["4096", "3", mode], { encoding: "utf8", env: process.env, timeout: 30_000 });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout);
    expect(out.mode).toBe(mode);
    expect(out.us).toHaveLength(3);
    for (const v of [...out.us, ...Object.values(out.steps)]) expect(v).toBeGreaterThan(0);
  });

  it("refuses a mode it does not know", () => {
    const r = spawnSync(baseline, ["4096", "3", "guess"], { encoding: "utf8", env: process.env });
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/usage: .* \[event\|fresh-event\|sender-sync\|local\]/);
  });
});
