// The shm handshake (the exchange of ring memory on the Unix socket) runs
// before JS sees a connection, so the core Listener's bounds cannot reach
// it: the shm listener keeps its own (ListenOptions), and tells a process
// out of file descriptors from a peer that breaks the protocol.
import { type ChildProcess, spawn } from "node:child_process";
import { readdirSync } from "node:fs";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { type Connection, ErrorCode } from "@tensorpipe/core/backend";
import { afterEach, describe, expect, it } from "vitest";
import { ShmTransport } from "../src/index.js";

const openFds = () => readdirSync("/proc/self/fd").length;

/** The count of open descriptors once what earlier tests closed is gone (closing takes a turn of the loop or two). */
async function steadyFds(): Promise<number> {
  let last = openFds();
  for (;;) {
    await new Promise((r) => setTimeout(r, 20));
    const now = openFds();
    if (now === last) return now;
    last = now;
  }
}

const hostilePeer = fileURLToPath(new URL("../build/Release/shm_hostile_peer", import.meta.url));

/**
 * `count` connections to a listener's name that never say a word, from a
 * process of their own (hostile_peer's silent mode); `closed[i]` settles
 * with the time (performance.now()) the listener closed connection i.
 */
async function silentPeers(name: string, count: number): Promise<{ closed: Promise<number>[]; stop: () => void }> {
  const peer = spawn(hostilePeer, [name, "silent", String(count)], { stdio: ["pipe", "pipe", "inherit"] });
  const settle: ((t: number) => void)[] = [];
  const closed = Array.from({ length: count }, (_, i) => new Promise<number>((r) => (settle[i] = r)));
  const connected = new Promise<void>((resolve, reject) => {
    peer.on("error", reject);
    peer.on("exit", (code) => reject(new Error(`the silent peer exited (${code})`)));
    createInterface({ input: peer.stdout! }).on("line", (line) => {
      if (line === "connected") resolve();
      const m = /^closed (\d+)$/.exec(line);
      if (m) settle[Number(m[1])]!(performance.now());
    });
  });
  await connected;
  return { closed, stop: () => peer.stdin!.end() };
}

/** Settles with every time, or null when one is not there within `ms`. */
const within = (times: Promise<number>[], ms: number) => Promise.race([Promise.all(times), new Promise<null>((r) => setTimeout(() => r(null), ms))]);

describe("shm handshake bounds", () => {
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0).reverse()) await c();
  });

  async function listen(options: { handshakeTimeout: number; maxPendingHandshakes: number }) {
    const transport = new ShmTransport();
    const accepted: Connection[] = [];
    const errors: (Error & { code?: string })[] = [];
    const listener = await transport.listen(
      "*",
      (c) => accepted.push(c),
      (e) => errors.push(e),
      options,
    );
    closers.push(
      () => listener.close(),
      () => accepted.forEach((c) => c.close()),
    );
    return { transport, listener, accepted, errors };
  }

  it("closes connections that never send their greeting once handshakeTimeout is past, and reports each", async () => {
    const { listener, errors } = await listen({ handshakeTimeout: 200, maxPendingHandshakes: 128 });
    const start = performance.now();
    const { closed, stop } = await silentPeers(listener.address(), 10);
    closers.push(stop);
    const when = await within(closed, 2000);
    expect(when, "the listener closed every silent peer").not.toBeNull();
    for (const t of when!) expect(t - start).toBeLessThan(1000);
    await expect.poll(() => errors.length).toBe(10);
    for (const e of errors) {
      expect(e).toMatchObject({ code: ErrorCode.TIMEOUT, message: expect.stringMatching(/shm handshake not done within 200 ms/) });
    }
  });

  it("drops the oldest handshakes past maxPendingHandshakes, so that a real peer gets in at once and nothing leaks", async () => {
    const before = await steadyFds();
    const { transport, listener, accepted, errors } = await listen({ handshakeTimeout: 60_000, maxPendingHandshakes: 4 });
    const { closed, stop } = await silentPeers(listener.address(), 50);
    closers.push(stop);
    // 46 went as the others came; each of those was closed, its descriptors with it.
    await expect.poll(() => errors.length).toBe(46);
    for (const e of errors) {
      expect(e).toMatchObject({
        code: ErrorCode.TIMEOUT,
        message: expect.stringMatching(/dropped for a newer connection, with maxPendingHandshakes \(4\) under way/),
      });
    }
    expect(await within(closed.slice(0, 46), 2000), "the dropped peers saw their connection closed").not.toBeNull();
    // Here: the listener's two, and 4 handshakes of 1 (the socket) each.
    await expect.poll(openFds).toBeLessThanOrEqual(before + 2 + 4 * 1 + 2);

    const t0 = performance.now();
    const client = await transport.connect(listener.address(), { signal: AbortSignal.timeout(5000) });
    await expect.poll(() => accepted.length).toBe(1);
    expect(performance.now() - t0).toBeLessThan(1000);
    expect(errors).toHaveLength(47);
    await client.write([new Uint8Array([1, 2, 3])]);
    expect(await accepted[0]!.read(16)).toEqual(new Uint8Array([1, 2, 3]));

    client.close();
    accepted[0]!.close();
    stop();
    listener.close();
    await expect.poll(openFds, { timeout: 5000 }).toBeLessThanOrEqual(before + 2);
  });

  it("a real peer ahead of a flood of silent ones in the backlog is not pushed out by them", async () => {
    const { transport, listener, accepted, errors } = await listen({ handshakeTimeout: 60_000, maxPendingHandshakes: 4 });
    // Its greeting is sent before connect() returns; then the loop stands
    // still while 50 silent peers queue up behind it in the backlog.
    const client = transport.connect(listener.address(), { signal: AbortSignal.timeout(5000) });
    const peer = spawn(hostilePeer, [listener.address(), "silent", "50"], { stdio: ["pipe", "ignore", "inherit"] });
    closers.push(() => peer.stdin!.end());
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
    closers.push(async () => (await client).close());
    await client;
    await expect.poll(() => errors.length).toBe(46);
    expect(accepted).toHaveLength(1);
  });

  it("closing the listener drops the handshakes under way, silently, and leaks nothing", async () => {
    const before = await steadyFds();
    const { listener, errors } = await listen({ handshakeTimeout: 60_000, maxPendingHandshakes: 128 });
    const { closed, stop } = await silentPeers(listener.address(), 20);
    closers.push(stop);
    // Each: its socket.
    await expect.poll(openFds).toBeGreaterThanOrEqual(before + 20);
    listener.close();
    const when = await within(closed, 2000);
    expect(when, "the listener closed every handshake under way").not.toBeNull();
    expect(errors).toHaveLength(0);
    await expect.poll(openFds, { timeout: 5000 }).toBeLessThanOrEqual(before + 2);
  });

  it("refuses bounds it cannot keep", async () => {
    const transport = new ShmTransport();
    for (const options of [
      { handshakeTimeout: 0, maxPendingHandshakes: 4 },
      { handshakeTimeout: Number.NaN, maxPendingHandshakes: 4 },
      { handshakeTimeout: 100, maxPendingHandshakes: 0 },
      { handshakeTimeout: 100, maxPendingHandshakes: 1.5 },
    ]) {
      await expect(
        transport.listen("*", () => undefined, undefined, options),
        JSON.stringify(options),
      ).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
      });
    }
    const unbounded = await transport.listen("*", () => undefined, undefined, { handshakeTimeout: Infinity, maxPendingHandshakes: Infinity });
    unbounded.close();
  });
});

// A process of its own, with few descriptors, driven line by line on stdin;
// it answers each line with one JSON line.
const child = `
  import { closeSync, openSync } from "node:fs";
  import { createInterface } from "node:readline";
  import { ShmTransport } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
  const t = new ShmTransport();
  const out = (o) => process.stdout.write(JSON.stringify(o) + "\\n");
  const errors = [];
  const hog = [];
  let listener;
  for await (const line of createInterface({ input: process.stdin })) {
    const [cmd, arg] = line.split(" ");
    if (cmd === "listen") {
      listener = await t.listen("*", (c) => c.close(), (e) => errors.push({ code: e.code, errnoName: e.errnoName, message: e.message }),
        { handshakeTimeout: 60000, maxPendingHandshakes: 1000 });
      out({ address: listener.address() });
    } else if (cmd === "fill") {
      // Takes every descriptor left, then gives back ARG of them.
      for (;;) {
        try { hog.push(openSync("/dev/null", "r")); } catch (e) { if (e.code !== "EMFILE") throw e; break; }
      }
      for (let i = 0; i < Number(arg); i++) closeSync(hog.pop());
      out({ hogged: hog.length });
    } else if (cmd === "connect") {
      try { (await t.connect(arg)).close(); out({ connected: true }); }
      catch (e) { out({ code: e.code, errnoName: e.errnoName, message: e.message }); }
    } else if (cmd === "cpu") {
      const cpu = process.cpuUsage();
      const t0 = performance.now();
      await new Promise((r) => setTimeout(r, 500));
      const used = process.cpuUsage(cpu);
      out({ cpu: (used.user + used.system) / 1000 / (performance.now() - t0) });
    } else if (cmd === "errors") {
      out({ errors: errors.slice(0, 20), count: errors.length });
    }
  }`;

interface Child {
  ask<T = Record<string, unknown>>(line: string): Promise<T>;
  process: ChildProcess;
}

function startChild(maxFds: number): Child {
  const proc = spawn("bash", ["-c", `ulimit -n ${maxFds} && exec "$0" "$@"`, process.execPath, "--input-type=module", "-e", child], {
    stdio: ["pipe", "pipe", "inherit"],
  });
  const answers: string[] = [];
  const waiting: ((line: string) => void)[] = [];
  createInterface({ input: proc.stdout! }).on("line", (line) => {
    const w = waiting.shift();
    if (w) w(line);
    else answers.push(line);
  });
  return {
    process: proc,
    ask: (line) => {
      proc.stdin!.write(`${line}\n`);
      return new Promise((resolve) => {
        const take = (answer: string) => resolve(JSON.parse(answer));
        const ready = answers.shift();
        if (ready !== undefined) take(ready);
        else waiting.push(take);
      });
    },
  };
}

describe("shm out of file descriptors", () => {
  const children: Child[] = [];
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0).reverse()) await c();
    for (const c of children.splice(0)) c.process.kill();
  });

  function spawnChild(): Child {
    const c = startChild(256);
    children.push(c);
    return c;
  }

  it("a listener out of descriptors for a connection's ring says EMFILE, not that the peer broke the protocol", async () => {
    const c = spawnChild();
    const { address } = await c.ask<{ address: string }>("listen");
    // Room for the accepted socket alone: its ring's memfd finds none.
    await c.ask("fill 1");
    const transport = new ShmTransport();
    // The connection failed on the listener's side: this end sees it go, in its handshake or after.
    const seen = transport.connect(address).then((conn) => {
      closers.push(() => conn.close());
      return conn.read(16);
    });
    await expect(seen).rejects.toMatchObject({ code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/) });
    await expect.poll(async () => (await c.ask<{ count: number }>("errors")).count).toBe(1);
    const { errors } = await c.ask<{ errors: { code: string; errnoName?: string; message: string }[] }>("errors");
    expect(errors[0]).toMatchObject({ code: ErrorCode.SYSTEM, errnoName: "EMFILE" });
  });

  it("a connector out of descriptors for its ring says EMFILE", async () => {
    const transport = new ShmTransport();
    const accepted: Connection[] = [];
    const listener = await transport.listen("*", (conn) => accepted.push(conn));
    closers.push(
      () => listener.close(),
      () => accepted.forEach((conn) => conn.close()),
    );
    const c = spawnChild();
    // Room for the socket alone: its ring's memfd finds none.
    await c.ask("fill 1");
    const answer = await c.ask(`connect ${listener.address()}`);
    expect(answer).toMatchObject({ code: ErrorCode.SYSTEM, errnoName: "EMFILE" });
  });

  it("a listener out of descriptors turns waiting peers away, says EMFILE once for them, and does not spin", async () => {
    const c = spawnChild();
    const { address } = await c.ask<{ address: string }>("listen");
    await c.ask("fill 0");
    const { closed, stop } = await silentPeers(address, 3);
    closers.push(stop);
    // Left in the backlog, they would wake the listener's poll on every turn of the loop.
    const { cpu } = await c.ask<{ cpu: number }>("cpu");
    expect(cpu).toBeLessThan(0.5);
    expect(await within(closed, 2000), "the waiting peers were closed").not.toBeNull();
    const { errors, count } = await c.ask<{ errors: { code: string; errnoName?: string }[]; count: number }>("errors");
    expect(count).toBeGreaterThanOrEqual(1);
    expect(count).toBeLessThanOrEqual(3);
    for (const e of errors) expect(e).toMatchObject({ code: ErrorCode.SYSTEM, errnoName: "EMFILE" });
  });
});
