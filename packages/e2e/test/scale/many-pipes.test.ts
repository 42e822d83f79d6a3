import { spawn } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Context, type Pipe } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerCmaChannel } from "@tensorpipe/channel-cma";
import { registerShmTransport } from "@tensorpipe/transport-shm";
import { registerUvTransport } from "@tensorpipe/transport-uv";
import { describe, expect, it } from "vitest";

const PIPES = 1000;
const client = fileURLToPath(new URL("../fixtures/many-pipes-client.mjs", import.meta.url));
const openFds = () => readdirSync("/proc/self/fd").length;
const rssMiB = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync("/proc/self/status", "utf8"))![1]) / 1024;
const shmMappings = () =>
  readFileSync("/proc/self/maps", "utf8")
    .split("\n")
    .filter((l) => l.includes("tensorpipe-js-shm")).length;

/** Echoes every message back until the pipe ends. */
async function echo(pipe: Pipe): Promise<void> {
  try {
    for await (const m of pipe) await pipe.write({ tensors: m.tensors.map((t) => ({ buffer: t.buffer, targetDevice: t.targetDevice ?? null })) });
  } catch {
    // The client went away mid-message: this pipe is done.
  }
}

describe.each([
  ["shm", registerShmTransport, "shm://*"],
  ["uv", registerUvTransport, "uv://127.0.0.1:0"],
] as const)(`${PIPES} pipes to one listener over %s`, (_name, register, url) => {
  it("all open at once and echo, cost the server a stated memory, and give every descriptor and mapping back once closed", async () => {
    const server = new Context();
    register(server);
    registerBasicChannel(server);
    registerCmaChannel(server);
    try {
      const listener = await server.listen(url);
      const dropped: Error[] = [];
      listener.on("connectionError", (e: Error) => dropped.push(e));
      void (async () => {
        for await (const pipe of listener) void echo(pipe);
      })();
      // Settled: the listener's own descriptors are open, nothing else is.
      await new Promise((r) => setTimeout(r, 100));
      const before = { fds: openFds(), maps: shmMappings(), rss: rssMiB() };

      const child = spawn(process.execPath, [client, listener.addresses()[0]!, String(PIPES), "5"], { stdio: ["pipe", "pipe", "inherit"] });
      const exited = new Promise((r) => child.once("exit", r));
      const line = await new Promise<string>((resolve) => createInterface({ input: child.stdout! }).once("line", resolve));
      const report = JSON.parse(line) as { opened?: number; echoed?: number; message?: string };
      expect(report).toMatchObject({ opened: PIPES, echoed: 5 * PIPES });
      expect(dropped).toEqual([]);
      const open = { fds: openFds() - before.fds, rssMiB: rssMiB() - before.rss };
      console.log(
        `${PIPES} pipes over ${_name}: ${(open.fds / PIPES).toFixed(1)} descriptors and ${((open.rssMiB * 1024) / PIPES).toFixed(0)} KiB of RSS a pipe on the server`,
      );
      // 256 KiB a pipe, open and echoing (README, "How many pipes").
      expect(open.rssMiB).toBeLessThan(256);

      child.stdin!.end();
      await exited;
      await expect.poll(openFds, { timeout: 10_000 }).toBe(before.fds);
      await expect.poll(shmMappings, { timeout: 10_000 }).toBe(before.maps);
    } finally {
      await server.close();
    }
  }, 120_000);
});
