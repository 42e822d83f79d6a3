import { execFile } from "node:child_process";
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import type { CmaThreadsResult } from "../src/scripts/cma-threads.js";

const run = promisify(execFile);
const script = fileURLToPath(new URL("../dist/scripts/cma-threads.js", import.meta.url));

// Figures are for reading, never asserted: what is checked is that every
// series ran at each number of threads, and that the peer's cma ran the
// copiers asked for (counted by their name in /proc), the default's too.
describe.skipIf(process.platform !== "linux")("cma-threads: cma's copy by copier threads against memcpy and cma (C)", () => {
  it("runs each series at each number of threads, and the default", async () => {
    const { stdout } = await run(process.execPath, [script, "--size", "9MiB", "--threads", "1,3", "--rounds", "1", "--json"]);
    const result = JSON.parse(stdout) as CmaThreadsResult;
    expect(result.size).toBe(9 * 2 ** 20);
    expect(result.rows.map((r) => [r.threads, r.copiers])).toEqual([
      [1, 1],
      [3, 3],
      [undefined, Math.min(4, availableParallelism())],
    ]);
    for (const r of result.rows) {
      expect(r.shmCma).toBeGreaterThan(0);
      if (r.threads !== undefined) {
        expect(r.memcpy).toBeGreaterThan(0);
        expect(r.memcpyC).toBeGreaterThan(0);
        expect(r.cmaC).toBeGreaterThan(0);
      }
    }
    for (const v of Object.values(result.ratios)) expect(v).toBeGreaterThan(0);
  });

  it("prints a table, and refuses a bad thread list", async () => {
    const { stdout } = await run(process.execPath, [script, "--size", "9MiB", "--threads", "2", "--rounds", "1"]);
    expect(stdout).toMatch(/^2 +2 +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d +\d+\.\d\d$/m);
    expect(stdout).toMatch(/^default +\d+ +\d+\.\d\d$/m);
    await expect(run(process.execPath, [script, "--threads", "0,2"])).rejects.toMatchObject({ code: 2, stderr: expect.stringContaining("--threads") });
  });
});
