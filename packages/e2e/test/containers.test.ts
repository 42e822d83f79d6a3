/**
 * What cma meets in restricted containers, played on this machine: a
 * seccomp filter that refuses process_vm_readv, and a peer in another pid
 * namespace. Each is told with its cause and the flag that fixes it, in
 * cma's viability (which doctor prints) or in the negotiation's reasons.
 */
import { execFileSync, spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type Context, ErrorCode, type TensorPipeError } from "@tensorpipe/core";
import { afterAll, beforeAll, describe, expect, it, onTestFinished } from "vitest";
import { createContext } from "@tensorpipe/bench";

const root = process.getuid?.() === 0;
const cmaDist = JSON.stringify(new URL("../../channel-cma/dist/index.js", import.meta.url).href);
const benchDist = JSON.stringify(new URL("../../bench/dist/index.js", import.meta.url).href);

describe("cma in restricted containers", () => {
  it("under a seccomp filter that refuses process_vm_readv, is not viable, and says so with the fix", () => {
    const dir = mkdtempSync(join(tmpdir(), "tp-seccomp-"));
    onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
    const wrapper = join(dir, "no-process-vm-readv");
    execFileSync("cc", ["-o", wrapper, fileURLToPath(new URL("fixtures/no-process-vm-readv.c", import.meta.url))]);
    const script = `import(${cmaDist}).then((m) => console.log(JSON.stringify(new m.CmaChannelContext().isViable())))`;
    const run = (args: string[]) => JSON.parse(execFileSync(args[0]!, args.slice(1), { encoding: "utf8" })) as { viable: boolean; reason?: string };
    expect(run([process.execPath, "-e", script])).toEqual({ viable: true });
    expect(run([wrapper, process.execPath, "-e", script])).toEqual({
      viable: false,
      reason: expect.stringMatching(
        /process_vm_readv is not permitted here.*a seccomp filter blocks it; in Docker, run with --security-opt seccomp=unconfined/,
      ),
    });
    // And doctor, run there, prints it beside cma.
    const doctor = execFileSync(wrapper, [process.execPath, fileURLToPath(new URL("../../cli/dist/main.js", import.meta.url)), "doctor"], { encoding: "utf8" });
    expect(doctor).toMatch(/cma\s+NOT VIABLE[^\n]*\n\s+why: process_vm_readv is not permitted here[^\n]*--security-opt seccomp=unconfined/);
  });

  describe.skipIf(!root || spawnSync("unshare", ["--pid", "--fork", "true"]).status !== 0)("a peer in another pid namespace (needs root and unshare)", () => {
    let server: Context;
    const errors: TensorPipeError[] = [];
    let url: string;
    beforeAll(async () => {
      server = await createContext();
      // Insisting on cma: the peer it cannot pair with is told, with why.
      const listener = await server.listen("uv://127.0.0.1:0", { path: { channels: ["cma"] } });
      listener.on("connectionError", (e) => errors.push(e));
      url = listener.addresses()[0]!;
    });
    afterAll(() => server?.close());

    it("is not paired over cma, and the reason names the pid namespaces and the flag", async () => {
      const script = `
        const { createContext } = await import(${benchDist});
        const c = await createContext();
        try { await c.connect(${JSON.stringify(url)}); console.log("connected"); } catch (e) { console.log(e.code); }
        await c.close();`;
      const child = spawn("unshare", ["--pid", "--fork", process.execPath, "--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      child.stdout!.on("data", (d) => (out += d));
      await new Promise((r) => child.once("exit", r));
      expect(out.trim()).toBe(ErrorCode.NEGOTIATION);
      await expect.poll(() => errors.length).toBeGreaterThan(0);
      expect(errors[0]).toMatchObject({
        code: ErrorCode.NEGOTIATION,
        message: expect.stringMatching(/cma: cpu:0->cpu:0: descriptors do not match .*: pid namespaces differ: run both in one \(docker run --pid=host/),
      });
    });
  });
});

describe.skipIf(!root || spawnSync("unshare", ["--user", "--map-root-user", "true"]).status !== 0)("a peer in another user namespace (needs unshare)", () => {
  it("is not paired over shm or cma, and each pipe's path names the user namespaces and the flag", async () => {
    const server = await createContext();
    try {
      const listener = await server.listen(["uv://127.0.0.1:0", "shm://"]);
      const script = `
        const { createContext } = await import(${benchDist});
        const c = await createContext();
        const p = await c.connect(${JSON.stringify(listener.addresses().find((a) => a.startsWith("uv://")))});
        console.log(JSON.stringify(p.path));
        await c.close();`;
      const child = spawn("unshare", ["--user", "--map-root-user", process.execPath, "--input-type=module", "-e", script], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      let out = "";
      child.stdout!.on("data", (d) => (out += d));
      const pipe = await listener.accept({ timeout: 20_000 });
      await new Promise((r) => child.once("exit", r));
      expect(pipe.transport).toBe("uv");
      const shm = pipe.path.verdicts.find((v) => v.kind === "transport" && v.name === "shm");
      expect(shm).toMatchObject({
        by: "here",
        outcome: "descriptors differ",
        reason: expect.stringMatching(/user namespaces differ: run both in one \(docker run --userns=host/),
      });
      expect(shm!.reason).not.toMatch(/network namespaces differ/);
      // The peer, told by the listener, says the same, in the listener's words made safe (quotes escaped).
      const theirs = JSON.parse(out) as { verdicts: { kind: string; name: string; by: string; reason: string }[] };
      expect(theirs.verdicts.find((v) => v.kind === "transport" && v.name === "shm")).toMatchObject({
        by: "there",
        reason: expect.stringMatching(/^domains differ \(\\"shm:[^"]+\\" here, \\"shm:[^"]+\\" there\): user namespaces differ/),
      });
      expect(theirs.verdicts.find((v) => v.kind === "channel" && v.name === "cma")?.reason).toMatch(/user namespaces differ/);
      // And doctor, run there with --peer, prints it.
      const doctor = spawn(
        "unshare",
        [
          "--user",
          "--map-root-user",
          process.execPath,
          fileURLToPath(new URL("../../cli/dist/main.js", import.meta.url)),
          "doctor",
          "--peer",
          listener.addresses().find((a) => a.startsWith("uv://"))!,
        ],
        {
          stdio: ["ignore", "pipe", "inherit"],
        },
      );
      let printed = "";
      doctor.stdout!.on("data", (d) => (printed += d));
      const [second] = await Promise.all([listener.accept({ timeout: 20_000 }), new Promise((r) => doctor.once("exit", r))]);
      second.close();
      expect(printed).toMatch(/pipe to uv:\/\/127\.0\.0\.1:\d+\n {2}connect side: transport uv; channels cpu:0->cpu:0 (basic|mpt)\n/);
      expect(printed).toMatch(
        / {2}transport shm: descriptors differ, the peer says: "domains differ .*user namespaces differ: run both in one \(docker run --userns=host/,
      );
    } finally {
      await server.close();
    }
  });
});
