import { execFile, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";
import { BACKEND_PACKAGES, createContext, findBackends } from "../src/backends.js";
import { type DoctorReport, formatDoctor, runDoctor } from "../src/doctor.js";

/** Each first-party package's `backend` export. */
async function firstParty() {
  return Promise.all(BACKEND_PACKAGES.map(async (p) => ({ packageName: p, backend: (await import(p)).backend })));
}
/** A package's version, as its own package.json says. */
const versionOf = (name: string) => (createRequire(import.meta.url)(`${name}/package.json`) as { version: string }).version;
const fixture = (name: string) => new URL(`fixtures/${name}`, import.meta.url).href;

const run = promisify(execFile);
const main = fileURLToPath(new URL("../dist/main.js", import.meta.url));

describe("tensorpipe doctor", () => {
  it("reports each backend as the backend itself judges it, with its package and version", async () => {
    const report = await runDoctor();
    const packages = await firstParty();
    expect(report.backends.map((b) => b.name).sort()).toEqual(packages.map((p) => p.backend.name).sort());
    for (const b of report.backends) {
      const { backend, packageName } = packages.find((p) => p.backend.name === b.name)!;
      expect(b).toMatchObject({ kind: backend.kind, packageName });
      const own = backend.create({}).isViable();
      expect(b).toMatchObject({ installed: true, version: versionOf(packageName), viable: own.viable });
      if (!own.viable) expect(b.reason).toBe(own.reason);
    }
    expect(report.backends.find((b) => b.name === "shm")?.domain).toMatch(/^shm:/);
    expect(report.backends.find((b) => b.name === "basic")?.devices).toEqual([{ device: "cpu:0", descriptor: "any" }]);
    expect(report.backends.find((b) => b.name === "mpt")).toMatchObject({
      devices: [{ device: "cpu:0", descriptor: "v2 split=1048576" }],
      note: "lanes on threads",
    });
    const lo = report.interfaces.find((i) => i.addresses.some((a) => a.address === "127.0.0.1"));
    expect(lo?.internal).toBe(true);
  });

  it("reports what bounds how many pipes this process can hold: open files and memory, as the kernel says", async () => {
    const report = await runDoctor();
    const line = readFileSync("/proc/self/limits", "utf8")
      .split("\n")
      .find((l) => l.startsWith("Max open files"))!;
    const [soft, hard] = line.split(/\s+/).slice(3, 5).map(Number);
    expect(report.limits.openFiles).toEqual({ soft, hard });
    expect(report.limits.availableMiB).toBeGreaterThan(0);
    const text = formatDoctor(report).join("\n");
    // The descriptors a pipe holds with each channel, as measured with /proc/self/fd.
    const lanes = report.backends.find((b) => b.name === "mpt")!.connections! - 1;
    expect(lanes).toBeGreaterThanOrEqual(4);
    expect(text).toContain(`open files: ${soft} (hard ${hard}): about `);
    expect(text).toContain(`${Math.floor(soft! / 5)} with cma (5 a pipe)`);
    expect(text).toContain(`${Math.floor(soft! / (3 + lanes))} with mpt (${3 + lanes} a pipe)`);
    expect(text).toContain(`${Math.floor(soft! / 3)} with basic (3 a pipe)`);
    expect(text).toMatch(/memory: \d+ MiB available/);
  });

  it("says a package is not installed and how to install it, and why a backend that throws is not viable", async () => {
    const [ghost, broken, none] = await findBackends({}, ["@tensorpipe/channel-ghost", fixture("broken-backend.mjs"), "@tensorpipe/core"]);
    expect(ghost).toMatchObject({ installed: false, viability: { viable: false, reason: "not installed (npm install @tensorpipe/channel-ghost)" } });
    expect(broken).toMatchObject({ installed: true, spec: { kind: "transport", name: "broken" }, viability: { viable: false, reason: "no such device here" } });
    expect(none).toMatchObject({ installed: true, viability: { viable: false, reason: expect.stringMatching(/exports no `backend`/) } });
  });

  it("closes every backend it makes: probing holds none, and each context closes its own", async () => {
    const counted = fixture("counted-transport.mjs");
    const { live } = (await import(counted)) as { live: Set<unknown> };
    const found = await findBackends({ backends: [counted] });
    expect(found.find((b) => b.spec.name === "counted")?.viability).toEqual({ viable: true });
    expect(live.size).toBe(0);
    await runDoctor({ backends: [counted] });
    expect(live.size).toBe(0);
    const contexts = [await createContext({ backends: [counted] }, found), await createContext({ backends: [counted] }, found)];
    expect(live.size).toBe(2);
    await Promise.all(contexts.map((c) => c.close()));
    expect(live.size).toBe(0);
  });

  it("takes a third party's backend with --backend, found by its `backend` export like the first-party ones", async () => {
    const { stdout } = await run(process.execPath, [main, "doctor", "--backend", fixture("inline-channel.mjs"), "--json"]);
    const report = JSON.parse(stdout) as DoctorReport;
    expect(report.backends.find((b) => b.name === "inline")).toMatchObject({
      kind: "channel",
      installed: true,
      viable: true,
      devices: [{ device: "cpu:0", descriptor: "inline-v1" }],
    });
  });

  it("exits 1, naming the module and why, when a --backend module fails to load, is missing, or exports no backend", async () => {
    for (const [module, why] of [
      [fixture("throws-on-load.mjs"), /failed to load: this module's native binary is missing/],
      ["./no-such-backend.mjs", /failed to load: Cannot find module/],
      ["@tensorpipe/core", /exports no `backend`/],
    ] as const) {
      const failed = await run(process.execPath, [main, "doctor", "--backend", module]).then(
        () => undefined,
        (e: { code: number; stdout: string }) => e,
      );
      expect(failed, module).toMatchObject({ code: 1 });
      const [named, verdict] = failed!.stdout.trimEnd().split("\n").slice(-2);
      expect(named).toContain(`--backend ${module}: NOT USABLE`);
      expect(named).toMatch(why);
      expect(verdict).toBe("NOT USABLE: 1 --backend module(s) gave no backend (above)");
    }
  });

  it("shows each backend's priority, as JSON and as text", async () => {
    const { stdout } = await run(process.execPath, [main, "doctor", "--backend", fixture("inline-channel.mjs"), "--json"]);
    const report = JSON.parse(stdout) as DoctorReport;
    const cma = (await import("@tensorpipe/channel-cma")).backend;
    expect(report.backends.find((b) => b.name === "cma")?.priority).toBe(cma.priority);
    expect(report.backends.find((b) => b.name === "inline")?.priority).toBeTypeOf("number");
    expect(formatDoctor(report).join("\n")).toMatch(new RegExp(`^ {2}cma +viable +priority ${cma.priority} +@tensorpipe/channel-cma@`, "m"));
  });

  it("takes --backend as a path from where the command runs, as a user types it", async () => {
    const cwd = fileURLToPath(new URL("fixtures/", import.meta.url));
    const { stdout } = await run(process.execPath, [main, "doctor", "--backend", "./inline-channel.mjs", "--json"], { cwd });
    expect((JSON.parse(stdout) as DoctorReport).backends.find((b) => b.name === "inline")).toMatchObject({ installed: true, viable: true });
  });

  it("prints the report as text and as JSON from the command line", async () => {
    const { stdout } = await run(process.execPath, [main, "doctor"]);
    const report = await runDoctor();
    // Available memory moves between the two runs.
    const steady = (lines: string[]) => lines.map((l) => l.replace(/memory: \d+ MiB available/, "memory: N MiB available"));
    expect(steady(stdout.trim().split("\n"))).toEqual(steady(formatDoctor(report)));
    expect(stdout).toMatch(/^ {2}uv {10}viable {9}priority \d+ +@tensorpipe\/transport-uv@\d+\.\d+\.\d+$/m);
    expect(stdout).toMatch(/^ {2}cuda-basic {2}(viable {9}|NOT VIABLE {5})priority \d+ +@tensorpipe\/channel-cuda-basic@\d+\.\d+\.\d+$/m);
    expect(stdout).toMatch(/^ {2}cuda-gdr {4}(viable {9}|NOT VIABLE {5})priority \d+ +@tensorpipe\/channel-cuda-gdr@\d+\.\d+\.\d+$/m);
    const json = JSON.parse((await run(process.execPath, [main, "doctor", "--json"])).stdout) as DoctorReport;
    expect(json.backends).toEqual(report.backends);
    expect(json.usable).toBe(true);
    // `pnpm doctor -- --json` hands the "--" on.
    const viaPnpm = JSON.parse((await run(process.execPath, [main, "doctor", "--", "--json"])).stdout) as DoctorReport;
    expect(viaPnpm.backends).toEqual(report.backends);
  });

  it("prints the whole report into a pipe, however long: it exits once stdout has drained", async () => {
    // 1.1 MB of one backend's reason, to a reader that takes a second to
    // start reading (as `| less` does): exiting at once cut it at 64 KiB.
    const child = spawn(process.execPath, [main, "doctor", "--backend", fixture("wordy-backend.mjs")], { stdio: ["ignore", "pipe", "inherit"] });
    let stdout = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stdout.pause();
    setTimeout(() => child.stdout.resume(), 1000);
    await once(child, "close");
    expect(stdout).toMatch(/why: (a long reason ){80000}end\n/);
    expect(stdout.trimEnd().split("\n").at(-1)).toMatch(/^usable: /);
  });

  it("prints the usage and exits 0 for --help after any command", async () => {
    for (const command of ["doctor", "bench", "peer"]) {
      for (const flag of ["--help", "-h"]) expect((await run(process.execPath, [main, command, flag])).stdout).toMatch(/^usage: tensorpipe <command>/);
    }
  });

  it("exits 2 with the usage on a bad command or option", async () => {
    for (const args of [
      ["frobnicate"],
      ["doctor", "--nope"],
      ["bench", "--sizes", "12Q"],
      ["bench", "--rounds", "3"],
      ["peer", "--lanes", "0"],
      ["peer", "--copy-threads", "0"],
      ["bench", "--copy-threads", "two"],
      ["peer", "--copy-threads", "65"],
      ["peer", "--timeout", "soon"],
      ["bench", "--transports", "foo"],
      ["bench", "--channels", "basic,nope"],
      ["bench", "--quick", "--channels", "cuda-ipc"],
    ]) {
      const failed = await run(process.execPath, [main, ...args]).then(
        () => undefined,
        (e: { code: number; stderr: string }) => e,
      );
      expect(failed?.code).toBe(2);
      expect(failed?.stderr).toMatch(/^tensorpipe: .+\n\nusage: tensorpipe/);
    }
  });
});
