import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import type { BenchFigures } from "../src/bench.js";

const run = promisify(execFile);
const main = fileURLToPath(new URL("../dist/main.js", import.meta.url));

describe("tensorpipe bench", () => {
  const dir = mkdtempSync(join(tmpdir(), "tp-cli-bench-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("times each pair asked for, the pair negotiation picks and node:net at each size, and holds them against node:net", async () => {
    const json = join(dir, "out.json");
    const { stdout } = await run(process.execPath, [
      main,
      "bench",
      "--quick",
      "--sizes",
      "64K,8",
      "--transports",
      "uv",
      "--channels",
      "basic,mpt",
      "--json",
      json,
    ]);
    const figures = JSON.parse(readFileSync(json, "utf8")) as BenchFigures;
    expect(figures.defaultPair).toBe("uv+mpt");
    expect(Object.keys(figures.series)).toEqual(["uv+mpt", "uv+basic", "default pair", "node:net"]);
    for (const [name, cells] of Object.entries(figures.series)) {
      expect(Object.keys(cells), name).toEqual(["8", "65536"]);
      for (const c of Object.values(cells)) {
        expect(c.p99, name).toBeGreaterThanOrEqual(c.p50);
        expect(c.p50, name).toBeGreaterThan(0);
        expect(c.gbps, name).toBeGreaterThan(0);
      }
    }
    expect(stdout).toMatch(/negotiation picks uv\+mpt/);
    expect(stdout).toMatch(/^8 B +uv\+mpt +\d+\.\d +\d+\.\d +\d+\.\d{3}$/m);
    expect(stdout).toMatch(/^ +node:net +\d+\.\d +\d+\.\d +\d+\.\d{3}$/m);
    expect(stdout).toMatch(/^ {2}default pair +\d+\.\d\dx GB\/s, \d+\.\d\dx round trip$/m);
    // The project's own targets are not a user's business.
    expect(stdout).not.toMatch(/target/);
  });

  it("says why it leaves out a channel asked for that it cannot measure, and measures the rest; no progress escapes where stderr is no terminal", async () => {
    const { stdout, stderr } = await run(process.execPath, [main, "bench", "--quick", "--sizes", "8", "--transports", "uv", "--channels", "basic,cuda-ipc"]);
    expect(stdout).toMatch(/^ {2}skipped cuda-ipc: it moves GPU tensors: bench-cuda measures those$/m);
    expect(stdout).toMatch(/negotiation picks uv\+basic/);
    expect(stderr).not.toMatch(/\x1b/);
  });
});

describe("a third-party transport (--backend)", () => {
  const fixture = new URL("fixtures/loopback-transport.mjs", import.meta.url).href;

  it("is listened on by `tensorpipe peer` at the URL it says, and timed by `tensorpipe bench`", async () => {
    const { stdout } = await run(process.execPath, [
      main,
      "bench",
      "--quick",
      "--sizes",
      "8",
      "--transports",
      "loopback",
      "--channels",
      "basic",
      "--backend",
      fixture,
    ]);
    expect(stdout).toMatch(/negotiation picks loopback\+basic/);
    expect(stdout).toMatch(/^8 B +loopback\+basic +\d+\.\d +\d+\.\d +\d+\.\d{3}$/m);
  });
});
