import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import type { MainThreadsResult } from "../src/scripts/cma-main-threads.js";

const run = promisify(execFile);
const script = fileURLToPath(new URL("../dist/scripts/cma-main-threads.js", import.meta.url));

// Figures are for reading, never asserted: what is checked is that both
// series streamed and each main thread's share was counted.
describe.skipIf(process.platform !== "linux")("cma-main-threads: shm+cma against cma (C), and the main threads' part", () => {
  it("streams each size both ways and counts both main threads per message", async () => {
    const { stdout } = await run(process.execPath, [script, "--sizes", "9MiB,12MiB", "--seconds", "0", "--json"]);
    const results = JSON.parse(stdout) as MainThreadsResult[];
    expect(results.map((r) => r.size)).toEqual([9 * 2 ** 20, 12 * 2 ** 20]);
    for (const r of results) {
      // Two turns at least, of ceil(384 MiB / size) messages.
      expect(r.messages).toBe(2 * Math.ceil(384 / (r.size / 2 ** 20)));
      expect(r.gbps).toBeGreaterThan(0);
      expect(r.cGbps).toBeGreaterThan(0);
      expect(r.senderCpu).toBeGreaterThan(0);
      expect(r.readerCpu).toBeGreaterThan(0);
      expect(r.senderSwitches).toBeGreaterThanOrEqual(0);
      expect(r.readerSwitches).toBeGreaterThanOrEqual(0);
    }
  });

  it("prints a table", async () => {
    const { stdout } = await run(process.execPath, [script, "--sizes", "9MiB", "--seconds", "0"]);
    expect(stdout).toMatch(/^9 MiB +86 +\d+\.\d\d +\d+\.\d\d +\d+ +\d+ +\d+\.\d\d +\d+\.\d\d$/m);
  });
});
