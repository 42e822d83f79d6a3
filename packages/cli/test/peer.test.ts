import { type ChildProcess, execFile, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { networkInterfaces, tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { CPU_DEVICE, Context, ErrorCode } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerUvTransport } from "@tensorpipe/transport-uv";
import { afterEach, describe, expect, it } from "vitest";

const main = fileURLToPath(new URL("../dist/main.js", import.meta.url));
const run = promisify(execFile);

interface Peer {
  child: ChildProcess;
  info: { url: string; urls: string[]; echoPort: number; sinkPort: number; pid: number };
  /** The lines it printed after its addresses. */
  events: { event: string; message?: string }[];
}

const running: ChildProcess[] = [];
afterEach(() => {
  for (const c of running.splice(0)) c.kill();
});

async function startPeer(args: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<Peer> {
  const child = spawn(process.execPath, [main, "peer", "--transports", "uv", "--channels", "basic", ...args], {
    stdio: ["pipe", "pipe", "inherit"],
    env: { ...process.env, ...env },
  });
  running.push(child);
  const lines = createInterface({ input: child.stdout! });
  const events: Peer["events"] = [];
  const first = await new Promise<string>((resolve, reject) => {
    lines.once("line", resolve);
    child.once("exit", (code) => reject(new Error(`tensorpipe peer exited with ${code} before listening`)));
  });
  lines.on("line", (l) => events.push(JSON.parse(l)));
  return { child, info: JSON.parse(first), events };
}

async function client(auth?: { secret: string }): Promise<Context> {
  const context = new Context(auth ? { auth } : {});
  registerUvTransport(context);
  registerBasicChannel(context);
  return context;
}

function rssOf(pid: number): number {
  return Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) * 1024;
}

describe("tensorpipe peer", () => {
  it("prints where it listens, echoes a pipe's messages, and ends when its stdin closes", async () => {
    const { child, info } = await startPeer();
    expect(info).toMatchObject({ pid: child.pid, urls: [info.url] });
    expect(info.url).toMatch(/^uv:\/\/127\.0\.0\.1:\d+$/);
    const context = await client();
    const pipe = await context.connect(info.url);
    const data = new Uint8Array(1000).map((_, i) => i);
    await pipe.write({ metadata: "hello", tensors: [{ buffer: data, targetDevice: CPU_DEVICE }] });
    const d = await pipe.readDescriptor();
    expect(d.metadata).toBe("hello");
    const back = new Uint8Array(1000);
    await pipe.read({ payloads: [], tensors: [{ buffer: back }] });
    expect(back).toEqual(data);
    await context.close();
    const exited = new Promise<number | null>((r) => child.once("exit", r));
    child.stdin!.end();
    expect(await exited).toBe(0);
  });

  it("refuses a backend name it does not know, saying which it has", async () => {
    for (const args of [
      ["--transports", "bogus"],
      ["--channels", "basic,bogus"],
    ]) {
      const out = await run(process.execPath, [main, "peer", ...args]).catch((e: { code: number; stderr: string }) => e);
      expect(out).toMatchObject({
        code: 2,
        stderr: expect.stringMatching(/^tensorpipe: no (transport|channel) named "bogus": the \w+s are [a-z-]+(, [a-z-]+)* \(--backend MODULE adds another\)/),
      });
    }
  });

  it("exits quietly, with 0, when whoever reads its stdout has gone", async () => {
    const child = spawn(process.execPath, [main, "peer", "--transports", "uv", "--channels", "basic"], { stdio: ["pipe", "pipe", "pipe"] });
    running.push(child);
    let stderr = "";
    child.stderr!.on("data", (d) => (stderr += d));
    const first = await new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once("line", resolve));
    // The reader goes; then a pipe ends, which the peer tells on stdout.
    child.stdout!.destroy();
    const context = await client();
    await context.connect(JSON.parse(first).url);
    const exited = new Promise<number | null>((r) => child.once("exit", r));
    await context.close();
    expect(await exited).toBe(0);
    expect(stderr).toBe("");
  });

  it("ends a node:net sink connection whose header asks for 2^40 bytes a message, and goes on", async () => {
    const { child, info, events } = await startPeer();
    const s = connect(info.sinkPort, "127.0.0.1");
    s.on("error", () => undefined);
    const header = Buffer.alloc(16);
    header.writeBigUInt64LE(2n ** 41n);
    header.writeBigUInt64LE(2n ** 40n, 8);
    s.write(header);
    await new Promise((r) => s.once("close", r));
    await expect.poll(() => events.some((e) => e.event === "connection-dropped" && /sink.*over 1073741824/.test(e.message!))).toBe(true);
    expect(child.exitCode).toBeNull();
    const context = await client();
    await context.connect(info.url, { timeout: 5000 });
    await context.close();
  });

  it("echoes over node:net no faster than the client reads: 256 MiB sent and never read stays in no queue of its", async () => {
    const { info } = await startPeer();
    const before = rssOf(info.pid);
    const s = connect(info.echoPort, "127.0.0.1");
    await new Promise((r) => s.once("connect", r));
    s.pause();
    const chunk = Buffer.alloc(1 << 20, 7);
    let sent = 0;
    // Until 256 MiB have gone, or the peer stopped taking them (64 MiB wait in this side's own queue).
    while (sent < 256 << 20 && s.writableLength < 64 << 20) {
      s.write(chunk);
      sent += chunk.length;
      if (s.writableLength > 8 << 20) await new Promise((r) => setTimeout(r, 5));
    }
    await new Promise((r) => setTimeout(r, 500));
    const grown = rssOf(info.pid) - before;
    s.destroy();
    // Before, it read everything and queued each echo: 768 MiB sent grew it by 770 MB.
    expect(grown).toBeLessThan(48 << 20);
  });

  it("keeps its node:net baselines on 127.0.0.1 when its pipes listen on every address", async () => {
    const external = Object.values(networkInterfaces())
      .flat()
      .find((a) => a && a.family === "IPv4" && !a.internal)?.address;
    if (external === undefined) return;
    const { info } = await startPeer(["--host", "0.0.0.0"]);
    const reach = (port: number, host: string) =>
      new Promise<string>((resolve) => {
        const s = connect(port, host, () => {
          s.destroy();
          resolve("connected");
        });
        s.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? "error"));
      });
    expect(await reach(info.echoPort, external)).toBe("ECONNREFUSED");
    expect(await reach(info.sinkPort, external)).toBe("ECONNREFUSED");
    expect(await reach(info.echoPort, "127.0.0.1")).toBe("connected");
    expect(await reach(Number(info.url.split(":").at(-1)), external)).toBe("connected");
  });

  it("with --secret-file, opens pipes only for peers that hold the secret", async () => {
    const dir = mkdtempSync(join(tmpdir(), "tp-peer-secret-"));
    try {
      const file = join(dir, "secret");
      writeFileSync(file, "a secret of the peer's, 32 bytes\n");
      const { info } = await startPeer(["--secret-file", file]);
      const stranger = await client();
      await expect(stranger.connect(info.url, { timeout: 5000 })).rejects.toMatchObject({
        code: ErrorCode.NEGOTIATION,
        message: expect.stringMatching(/requires authentication/),
      });
      await stranger.close();
      const wrong = await client({ secret: "another secret, also 32 bytes..." });
      await expect(wrong.connect(info.url, { timeout: 5000 })).rejects.toMatchObject({ code: ErrorCode.PERMISSION_DENIED });
      await wrong.close();
      const friend = await client({ secret: "a secret of the peer's, 32 bytes" });
      const pipe = await friend.connect(info.url, { timeout: 5000 });
      await pipe.write({ metadata: "hi" });
      expect((await pipe.readMessage({ timeout: 5000 })).metadata).toBe("hi");
      await friend.close();
      // doctor --peer takes the same file.
      const doctor = await run(process.execPath, [main, "doctor", "--peer", info.url, "--secret-file", file]);
      expect(doctor.stdout.trimEnd().split("\n").at(-1)).toBe(`pipe to ${info.url}: opened over uv`);
      // From the environment too.
      const fromEnv = await startPeer([], { TENSORPIPE_SECRET: "a secret of the peer's, 32 bytes" });
      const again = await client({ secret: "a secret of the peer's, 32 bytes" });
      await again.connect(fromEnv.info.url, { timeout: 5000 });
      await again.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
