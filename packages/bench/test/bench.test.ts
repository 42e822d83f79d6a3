import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, describe, expect, it } from "vitest";
import { type BenchResult, README_LOOP, probeBackends, median, runBench, warmRoundTrips } from "../src/index.js";

const run = promisify(execFile);
const main = fileURLToPath(new URL("../dist/main.js", import.meta.url));

describe("the project's bench", () => {
  const dir = mkdtempSync(join(tmpdir(), "tp-bench-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("measures every viable pair and the baselines at each size, and plots them", async () => {
    const lines: string[] = [];
    const progress: string[] = [];
    const svgPath = join(dir, "plot.svg");
    const result = await runBench({
      quick: true,
      sizes: [64 * 1024, 8],
      svgPath,
      print: (l) => lines.push(l),
      progress: { write: (s) => progress.push(s) },
      targets: true,
    });
    const found = await probeBackends();
    const viable = (kind: string) => found.filter((b) => b.descriptor.kind === kind && b.memory !== "cuda" && b.viability.viable).map((b) => b.descriptor.name);
    const pairs = viable("transport").flatMap((t) => viable("channel").map((c) => `${t}+${c}`));
    expect(result.sizes).toEqual([8, 64 * 1024]);
    expect(
      result.series
        .filter((s) => s.kind === "pipe")
        .map((s) => s.name)
        .sort(),
    ).toEqual(pairs.sort());
    expect(result.series.filter((s) => s.kind === "baseline").map((s) => s.name)).toEqual([
      "memcpy",
      "shm ring (C)",
      "TCP (C)",
      "cma (C)",
      "node:net",
      "zeromq",
    ]);
    // The README's own loop, over the pair a user's pipe gets (shm here), held against the tuned loop over it.
    const readme = result.series.find((s) => s.kind === "user-code")!;
    expect(readme).toMatchObject({ name: README_LOOP, over: expect.stringMatching(/^shm\+/) });
    expect(pairs).toContain(readme.over);
    expect(result.ratios[`${README_LOOP} 8 B RTT p50 / tuned loop`]).toBeGreaterThan(0);
    expect(result.ratios[`${README_LOOP} 8 B RTT p99 / its p50`]).toBeGreaterThanOrEqual(1);
    expect(result.ratios[`${README_LOOP} 8 B RTT p50 / shm ring (C)`]).toBeGreaterThan(0);
    // The pair negotiation picks is one of the pairs measured: never above the best of them.
    for (const size of ["8 B", "64 KiB"]) {
      const ratio = result.ratios[`default pair ${size} GB/s / best pair`];
      expect(ratio, size).toBeGreaterThan(0);
      expect(ratio, size).toBeLessThanOrEqual(1);
    }
    // At each size, the pair negotiation picks streamed again head to head with the pair furthest ahead of it, if one was.
    for (const size of result.sizes) {
      const h = result.headToHead[size]!;
      expect(h.own, `${size}`).toHaveLength(h.other.length);
      if (h.own.length === 0) expect(h.against).toBe(readme.over);
      else expect(pairs.filter((p) => p !== readme.over)).toContain(h.against);
    }
    expect(lines.join("\n")).toMatch(
      /default pair 64 KiB GB\/s \/ best pair +\d+\.\d+x \(target >= 0\.9: (met|NOT met)\), (head to head with \S+|no pair ahead of it)$/m,
    );
    expect(lines.join("\n")).toMatch(/README loop 8 B RTT p50 \/ tuned loop +\d+\.\d+x \(target <= 1\.2: (met|NOT met)\)/);
    for (const s of result.series) {
      for (const size of result.sizes) {
        const cell = s.cells[size]!;
        expect(cell.gbps, `${s.name} ${size}`).toBeGreaterThan(0);
        expect(cell.meanGbps, `${s.name} ${size}`).toBeGreaterThan(0);
        // One figure per stream turn, as many in every series: ratios pair them turn by turn.
        expect(cell.turnsGbps, `${s.name} ${size}`).toHaveLength(result.series[0]!.cells[size]!.turnsGbps.length);
        expect(median(cell.turnsGbps)).toBe(cell.gbps);
        // Every series but the copies times round trips too.
        if (s.name === "memcpy" || s.name === "cma (C)") expect(cell.p50, `${s.name} ${size}`).toBeUndefined();
        else expect(cell.p99!, `${s.name} ${size}`).toBeGreaterThanOrEqual(cell.p50!);
      }
    }
    expect(result.ratios["uv+basic 64 KiB GB/s / zeromq"]).toBeGreaterThan(0);
    expect(result.ratios["shm+cma 64 KiB GB/s / cma (C)"]).toBeGreaterThan(0);
    expect(result.ratios["cma (C) 64 KiB GB/s / memcpy"]).toBeGreaterThan(0);
    expect(lines.join("\n")).toMatch(/^ {2}cma \(C\) +GB\/s \d+\.\d\dx memcpy \(cma's copy without Node/m);
    expect(result.ratios["uv+basic 8 B RTT p50 / node:net"]).toBeGreaterThan(0);
    expect(lines.join("\n")).toMatch(/^64 KiB +shm\+cma +\d+\.\d +\d+\.\d +\d+\.\d{3} +\d+\.\d{3}$/m);
    const svg = readFileSync(svgPath, "utf8");
    for (const s of result.series) expect(svg).toContain(`data-series="${s.name}"`);
    expect(svg.match(/<polyline /g)).toHaveLength(result.series.length);
    expect(progress.at(-1)).toMatch(/^\[#{30}\] 100% /);
  });

  it("runs from the command line, for the pairs asked for", async () => {
    const json = join(dir, "out.json");
    const { stdout } = await run(process.execPath, [
      main,
      "--quick",
      "--sizes",
      "4K",
      "--transports",
      "uv",
      "--channels",
      "basic",
      "--no-zmq",
      "--svg",
      join(dir, "cli.svg"),
      "--json",
      json,
    ]);
    expect(stdout).toContain("skipped zeromq: --no-zmq");
    const result = JSON.parse(readFileSync(json, "utf8")) as BenchResult;
    expect(result.series.map((s) => s.name)).toEqual(["uv+basic", README_LOOP, "memcpy", "shm ring (C)", "TCP (C)", "cma (C)", "node:net"]);
    // What the pipes carried: every message of the run, each way, through basic.
    expect(Object.keys(result.stats)).toEqual(["uv+basic", README_LOOP]);
    const stats = result.stats["uv+basic"]!;
    expect(stats).toMatchObject({ pipesOpened: 1, errors: {}, connectionErrors: {} });
    expect(stats.messagesSent).toBeGreaterThan(100);
    expect(stats.channels.basic!.bytesSent).toBe(stats.channels.basic!.tensorsSent * 4096);
  });
});

describe("warmRoundTrips", () => {
  const none = new Uint8Array(0);

  it("asks for one round trip, then twice as many each time up to 200, and no more than the number asked for", async () => {
    const asked: number[] = [];
    await warmRoundTrips(
      async (_d, _b, n) => {
        asked.push(n);
        return [];
      },
      none,
      none,
      1000,
    );
    expect(asked).toEqual([1, 2, 4, 8, 16, 32, 64, 128, 200, 200, 200, 145]);
  });

  // Round trips of 64 MiB take tens of milliseconds: a cap in numbers would take minutes.
  it("stops asking once the time it may take has passed", async () => {
    let calls = 0;
    const slow = async () => {
      calls++;
      await new Promise((r) => setTimeout(r, 40));
      return [];
    };
    await warmRoundTrips(slow, none, none, 20_000, 100);
    // Each takes 40 ms at least: a third call ends past the 100 ms.
    expect(calls).toBeGreaterThanOrEqual(1);
    expect(calls).toBeLessThanOrEqual(3);
  });
});
