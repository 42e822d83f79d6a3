/**
 * worker.terminate() at random points of a pipe's life, for every viable
 * transport x channel pair: while the worker listens or connects, in the
 * middle of the handshake, and mid-transfer of 64 MiB tensors both ways
 * (a cma copy on the thread pool, mpt's lane threads). Half the time the
 * pipe joins the worker to this thread, half the time to a second worker.
 * A quarter of the workers joined to this thread end themselves with
 * process.exit() instead. The process survives; the surviving end's pending operations reject with
 * ERR_TP_PEER_CLOSED or ERR_TP_CONNECTION_RESET; the listener goes on; and
 * file descriptors and shared-memory mappings come back to where they were.
 * WORKER_TERMINATIONS scales it (20 per pair by default).
 */
import { readFileSync, readdirSync, readlinkSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { Worker } from "node:worker_threads";
import type { Listener, Pipe } from "@tensorpipe/core";
import { prng } from "@tensorpipe/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { streamUntilFailure } from "./workers/stream.mjs";

const TERMINATIONS = Number(process.env.WORKER_TERMINATIONS ?? 20);
const BYTES = 64 * 1024 * 1024;
const SURVIVOR = /^ERR_TP_(PEER_CLOSED|CONNECTION_RESET)$/;
const PIPE_END = new URL("./workers/pipe-end.mjs", import.meta.url);

const fds = () => readdirSync("/proc/self/fd").length;
const openFds = () =>
  readdirSync("/proc/self/fd")
    .map((fd) => {
      try {
        return readlinkSync(`/proc/self/fd/${fd}`);
      } catch {
        return "?";
      }
    })
    .join(" ");
/**
 * The descriptor count once it holds still: a context's close() resolves
 * before its native handles' close callbacks have run (a loop turn later),
 * so the pair before this one may still be letting go of its descriptors.
 */
async function settledFds(): Promise<number> {
  for (let last = -1; ; await sleep(20)) {
    const now = fds();
    if (now === last) return now;
    last = now;
  }
}
const shmMaps = () =>
  readFileSync("/proc/self/maps", "utf8")
    .split("\n")
    .filter((l) => l.includes("tensorpipe-js-shm")).length;

type Step = { step: "listening"; address: string } | { step: "connecting" | "streaming" } | { step: "failed"; codes: string[] };

/** A worker running one pipe end, and the steps it has reported so far. */
class PipeEndWorker {
  readonly worker: Worker;
  readonly steps: Step[] = [];
  private readonly waiters: (() => void)[] = [];
  readonly exited: Promise<number>;

  constructor(data: { role: "listen" | "connect"; url: string; transport: string; channel: string; exitAfterMs?: number }) {
    this.worker = new Worker(PIPE_END, { workerData: { ...data, bytes: BYTES } });
    this.worker.on("message", (m: Step) => {
      this.steps.push(m);
      for (const w of this.waiters.splice(0)) w();
    });
    this.exited = new Promise((r) => this.worker.once("exit", r));
    this.worker.on("error", () => undefined);
  }

  // The first step waits on a worker that loads Node, the package graph and
  // the addons: under the full suite on two cores that once took over 10 s.
  async until<S extends Step["step"]>(step: S, timeoutMs = 30_000): Promise<Extract<Step, { step: S }>> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.steps.find((s) => s.step === step);
      if (found) return found as Extract<Step, { step: S }>;
      if (Date.now() > deadline) throw new Error(`worker never reported "${step}" (it did: ${this.steps.map((s) => s.step)})`);
      await Promise.race([new Promise<void>((r) => this.waiters.push(r)), sleep(100)]);
    }
  }
}

const transports = ["uv", "shm"] as const;
const channels = ["basic", "cma", "mpt"] as const;
const pairs = transports.flatMap((t) => channels.map((c) => [t, c] as const));

describe.each(pairs)("worker terminated, over %s + %s", (transport, channel) => {
  const listenUrl = transport === "shm" ? "shm://" : "uv://127.0.0.1:0";
  let viable = true;
  let listener: Listener;
  let close: () => Promise<void>;

  beforeAll(async () => {
    const context = await createContext({ transports: [transport], channels: [channel] });
    const unusable = context.backends().filter((b) => !b.viability.viable);
    if (unusable.length > 0) {
      viable = false;
      console.log(`skipped: ${unusable.map((b) => `${b.name}: ${b.viability.reason}`).join("; ")}`);
    }
    listener = await context.listen(listenUrl);
    close = () => context.close();
  });
  afterAll(() => close?.());

  it(`${TERMINATIONS} terminations: the process, the listener and the other end go on; nothing leaks`, async (t) => {
    if (!viable) t.skip();
    const rand = prng(transport.length * 7 + channel.length);
    const before = { fds: await settledFds(), maps: shmMaps() };
    let accepting: Promise<Pipe> | undefined;
    let rejected = 0;
    for (let i = 0; i < TERMINATIONS; i++) {
      // When in the pipe's life: 0-5 ms is mostly the handshake, the rest mid-transfer.
      const delay = rand() < 0.3 ? rand() * 5 : 20 + rand() * 150;
      if (i % 2 === 0) {
        // The worker connects to this thread's listener; one time in four
        // it ends itself with process.exit() instead of being terminated.
        const exits = i % 4 === 2;
        const end = new PipeEndWorker({
          role: "connect",
          url: listener.addresses()[0]!,
          transport,
          channel,
          exitAfterMs: exits ? 20 + delay : undefined,
        });
        accepting ??= listener.accept();
        await end.until("connecting");
        await sleep(delay);
        const streaming = end.steps.some((s) => s.step === "streaming");
        if (exits) await end.exited;
        else await end.worker.terminate();
        const pipe = await Promise.race([accepting, sleep(streaming ? 5000 : 300).then(() => undefined)]);
        if (!pipe) continue;
        accepting = undefined;
        const started = performance.now();
        const codes = await streamUntilFailure(pipe, BYTES);
        expect(performance.now() - started).toBeLessThan(5000);
        for (const code of codes) expect(code).toMatch(SURVIVOR);
        rejected++;
      } else {
        // Two workers; either one goes.
        const server = new PipeEndWorker({ role: "listen", url: listenUrl, transport, channel });
        const { address } = await server.until("listening");
        const client = new PipeEndWorker({ role: "connect", url: address, transport, channel });
        await client.until("connecting");
        await sleep(delay);
        const [victim, survivor] = rand() < 0.5 ? [server, client] : [client, server];
        await victim.worker.terminate();
        if (survivor.steps.some((s) => s.step === "streaming")) {
          const { codes } = await survivor.until("failed", 5000);
          for (const code of codes) expect(code).toMatch(SURVIVOR);
          rejected++;
        }
        await survivor.worker.terminate();
      }
    }
    // A handshake cut short leaves an accept that closing the context rejects.
    accepting?.catch(() => undefined);
    // Most terminations hit a pipe that was up (the rest, its handshake).
    expect(rejected).toBeGreaterThan(TERMINATIONS / 4);
    // A connection whose handshake was cut may wait out the listener's
    // handshake timeout (10 s) before it is closed.
    const waitStarted = Date.now();
    const lingering = openFds();
    await expect
      .poll(fds, { timeout: 12_000, message: `descriptors open as the wait began (${before.fds} before the terminations): ${lingering}` })
      .toBe(before.fds);
    if (Date.now() - waitStarted > 2000) console.log(`descriptors took ${Date.now() - waitStarted} ms to close: ${lingering}`);
    await expect.poll(shmMaps, { timeout: 5000 }).toBe(before.maps);
  });
});
