import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { type SparseResult, sparseRoundTrips } from "../src/scripts/sparse-round-trips.js";

const run = promisify(execFile);

// Figures are for reading, never asserted: what is checked is that each
// pause ran its round trips between two processes and says what they cost.
describe.skipIf(process.platform !== "linux")("sparse-round-trips: README round trips over shm with pauses", () => {
  it("times the round trips and counts each end's CPU for every pause", async () => {
    const results = await sparseRoundTrips([1, 2], 20);
    expect(results.map((r) => r.gapMs)).toEqual([1, 2]);
    for (const r of results) {
      expect(r.count).toBe(20);
      expect(r.p50).toBeGreaterThan(0);
      expect(r.p90).toBeGreaterThanOrEqual(r.p50);
      expect(r.clientCpu).toBeGreaterThan(0);
      expect(r.peerCpu).toBeGreaterThanOrEqual(0);
    }
  });

  it("prints a table, or JSON when asked", async () => {
    const script = fileURLToPath(new URL("../dist/scripts/sparse-round-trips.js", import.meta.url));
    const { stdout } = await run(process.execPath, [script, "--gaps", "1", "--count", "10", "--json"]);
    const results = JSON.parse(stdout) as SparseResult[];
    expect(results).toHaveLength(1);
    const table = (await run(process.execPath, [script, "--gaps", "1", "--count", "10"])).stdout;
    expect(table).toMatch(/^1 +10 +\d+\.\d +\d+\.\d +\d+ +\d+$/m);
  });
});
