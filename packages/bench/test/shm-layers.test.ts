import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { type Layer, measureShmLayers } from "../src/scripts/shm-layers.js";

const run = promisify(execFile);

// Figures are for reading, never asserted: what is checked is that every
// layer ran its round trips between two processes and says how long they took.
describe("shm-layers: an 8 B round trip over shm, layer by layer", () => {
  it("times every layer from the C ring to the README's loop", async () => {
    const layers = await measureShmLayers(0.2);
    expect(layers.map((l) => l.name)).toEqual([
      "shm ring (C)",
      "shm connection, callbacks",
      "shm connection, awaits",
      "pipe shm+basic, metadata only",
      expect.stringMatching(/^README loop, 8 B tensor \(shm\+\w+\)$/),
    ]);
    for (const l of layers) {
      expect(l.count, l.name).toBeGreaterThan(10);
      expect(l.p50, l.name).toBeGreaterThan(0);
      expect(l.p99, l.name).toBeGreaterThanOrEqual(l.p50);
    }
  });

  it("prints a table, or JSON when asked", async () => {
    const script = fileURLToPath(new URL("../dist/scripts/shm-layers.js", import.meta.url));
    const { stdout } = await run(process.execPath, [script, "--seconds", "0.1", "--json"]);
    const layers = JSON.parse(stdout) as Layer[];
    expect(layers).toHaveLength(5);
    const table = (await run(process.execPath, [script, "--seconds", "0.1"])).stdout;
    expect(table).toMatch(/^shm connection, callbacks +\d+ +\d+\.\d\d +\d+\.\d\d +\d+\.\d\dx$/m);
  });
});
