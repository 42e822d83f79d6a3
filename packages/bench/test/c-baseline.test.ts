import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { VIABLE, notViable } from "@tensorpipe/core/backend";
import type { ProbedBackend } from "../src/context.js";
import { CBaseline, C_BASELINES, C_SERIES, type CRoundTrips, findCBaselines } from "../src/c-baseline.js";

// The C programs the bench holds the backends against.
describe.each(C_BASELINES)("$name", (spec) => {
  const found = CBaseline.find(spec);
  const roundTrips = it.runIf(spec.roundTrips);

  it("is built", () => {
    expect(found).toBeInstanceOf(CBaseline);
  });

  roundTrips("times one round trip per frame, the bytes echoed intact", async () => {
    const { us } = await (found as CBaseline).roundTrips(4096, 50);
    expect(us).toHaveLength(50);
    for (const t of us) expect(t).toBeGreaterThan(0);
  });

  // Left together on the parent's core, the two processes time the
  // scheduler's hand-over rather than the exchange.
  roundTrips("times round trips from two cores where this process may use two", async () => {
    const { cores } = await (found as CBaseline).roundTrips(8, 10);
    const allowed = allowedCores();
    if (allowed.length < 2) expect(cores).toEqual([]);
    else expect(cores).toEqual(allowed.slice(0, 2));
  });

  // `count` 8 B round trips with the program and its peer on this process's first core; undefined without taskset.
  const onOneCore = (count: number): CRoundTrips | undefined => {
    const taskset = spawnSync("taskset", ["-c", String(allowedCores()[0]), (found as CBaseline).path, "pingpong", "8", String(count)], {
      encoding: "utf8",
    });
    if (taskset.error) return undefined;
    expect(taskset.status, taskset.stderr).toBe(0);
    return JSON.parse(taskset.stdout) as CRoundTrips;
  };

  roundTrips("times round trips where it is told when this process may use one core", async () => {
    const out = onOneCore(5);
    if (!out) return; // no taskset here
    expect(out.us).toHaveLength(5);
    expect(out.cores).toEqual([]);
  });

  // The shm ring's ends yield at once to a peer that last ran on their core
  // (else only after 20 us of polling, twice a round trip).
  it.runIf(spec.name === "shm ring (C)")("hands one core back and forth at each look when both ends share it", () => {
    const out = onOneCore(3000);
    if (!out) return; // no taskset here
    const us = out.us.sort((a, b) => a - b);
    expect(us[1500]).toBeLessThan(30);
  });

  it("streams frames larger than a ring or a socket buffer, the last one checked at the peer", async () => {
    const gbps = await (found as CBaseline).throughput(9 * 1024 * 1024 + 5, 3);
    expect(gbps).toBeGreaterThan(0);
  });

  it.runIf(!spec.roundTrips)("says it streams only when asked for round trips", async () => {
    await expect((found as CBaseline).roundTrips(8, 1)).rejects.toThrow(/streams only/);
    const direct = spawnSync((found as CBaseline).path, ["pingpong", "8", "1"], { encoding: "utf8" });
    expect(direct.status).toBe(2);
    expect(direct.stderr).toMatch(/stream only/);
  });
});

describe("the C programs that can run here", () => {
  const backend = (name: string, viable: boolean): ProbedBackend => ({
    descriptor: { kind: name === "cma" ? "channel" : "transport", name, priority: 0, create: () => undefined as never },
    viability: viable ? VIABLE : notViable("no process_vm_readv in this test"),
  });

  it("leaves out the program of a backend that is not viable here, saying why", () => {
    const { found, skipped } = findCBaselines([backend("shm", true), backend("uv", true), backend("cma", false)]);
    expect(found.map((b) => b.name)).toEqual(["shm ring (C)", "TCP (C)"]);
    expect(skipped).toEqual([{ name: "cma (C)", reason: "cma is not viable here: no process_vm_readv in this test" }]);
  });

  it("runs every program whose backend is viable or was not looked for", () => {
    const { found, skipped } = findCBaselines([backend("cma", true)]);
    expect(found.map((b) => b.name)).toEqual(C_BASELINES.map((s) => s.name));
    expect(skipped).toEqual([]);
  });

  it("finds a program by the series it stands for, or says there is none", () => {
    const cma = CBaseline.named(C_SERIES.cma);
    expect(cma).toBeInstanceOf(CBaseline);
    expect((cma as CBaseline).spec.program).toBe("cma_baseline");
    expect(CBaseline.named("memcpy")).toEqual({ missing: 'no C program stands for "memcpy"' });
  });
});

/** The cores this process may run on, from /proc (Cpus_allowed_list: "0-3,8"). */
function allowedCores(): number[] {
  const list = /^Cpus_allowed_list:\s*(.+)$/m.exec(readFileSync("/proc/self/status", "utf8"))![1]!;
  return list.split(",").flatMap((part) => {
    const [a, b] = part.split("-").map(Number);
    return Array.from({ length: (b ?? a!) - a! + 1 }, (_, i) => a! + i);
  });
}
