import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { createContext } from "@tensorpipe/bench";
import { CPU_DEVICE, type Context, ErrorCode, type Pipe } from "@tensorpipe/core";
import { patterned, hasPattern } from "@tensorpipe/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { Rendezvous } from "../src/index.js";

describe("a local rendezvous", () => {
  it("hands the very object sent to a recv made before or after the send", async () => {
    const r = Rendezvous.local();
    const a = new Float32Array([1, 2, 3]);
    const early = r.recv("a");
    r.send("a", a);
    expect(await early).toBe(a);
    const b = new Int32Array([4]);
    r.send("b", b);
    expect(await r.recv("b")).toBe(b);
    expect(r.pendingKeys()).toEqual({ arrived: [], waiting: [] });
  });

  it("keeps a key sent twice for two recvs, in order", async () => {
    const r = Rendezvous.local();
    r.send("k", new Uint8Array([1]));
    r.send("k", new Uint8Array([2]));
    expect([...((await r.recv("k")) as Uint8Array)]).toEqual([1]);
    expect([...((await r.recv("k")) as Uint8Array)]).toEqual([2]);
  });

  it("times out a recv with ERR_TP_TIMEOUT and keeps a later value for the next recv", async () => {
    const r = Rendezvous.local();
    await expect(r.recv("late", { timeout: 30 })).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
    expect(r.pendingKeys().waiting).toEqual([]);
    const v = new Uint16Array([7]);
    r.send("late", v);
    expect(await r.recv("late")).toBe(v);
  });

  it("cancels a recv with an AbortSignal", async () => {
    const r = Rendezvous.local();
    const ac = new AbortController();
    const p = r.recv("x", { signal: ac.signal });
    ac.abort();
    await expect(p).rejects.toMatchObject({ code: ErrorCode.ABORTED });
  });

  it("copies into the caller's memory when asked, and checks its size", async () => {
    const r = Rendezvous.local();
    const into = new Float64Array(2);
    const p = r.recv("v", { into });
    r.send("v", new Float64Array([1.5, 2.5]));
    expect(await p).toBe(into);
    expect([...into]).toEqual([1.5, 2.5]);
    r.send("w", new Float64Array([1]));
    await expect(r.recv("w", { into })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
  });

  it("keeps a value for the next recv when memory given for it does not fit, whether it came before or after", async () => {
    const r = Rendezvous.local();
    r.send("before", new Float64Array([1]));
    await expect(r.recv("before", { into: new Float64Array(2) })).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringContaining("stays for the next"),
    });
    expect(r.pendingKeys().arrived).toEqual(["before"]);
    expect([...((await r.recv("before")) as Float64Array)]).toEqual([1]);

    const wrong = r.recv("after", { into: new Float64Array(2) });
    const right = r.recv("after");
    r.send("after", new Float64Array([2]));
    await expect(wrong).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    expect([...((await right) as Float64Array)]).toEqual([2]);
  });

  it("refuses options that are not, before taking anything", async () => {
    const r = Rendezvous.local();
    r.send("k", new Uint8Array([1]));
    for (const options of [{ into: [1] }, { timeout: -1 }, { timeout: "5" }, { signal: {} }, { signal: AbortSignal.abort() }]) {
      await expect(r.recv("k", options as never)).rejects.toMatchObject({ code: expect.stringMatching(/ERR_TP_(INVALID_ARG|ABORTED)/) });
    }
    expect(r.pendingKeys().arrived).toEqual(["k"]);
  });

  it("rejects waiting recvs on close, and refuses sends after it", async () => {
    const r = Rendezvous.local();
    const p = r.recv("never");
    r.close();
    await expect(p).rejects.toMatchObject({ code: ErrorCode.CLOSED, message: expect.stringContaining('"never"') });
    expect(() => r.send("x", new Uint8Array(1))).toThrow(expect.objectContaining({ code: ErrorCode.CLOSED }));
    expect((await r.closed).code).toBe(ErrorCode.CLOSED);
  });

  it("refuses values it cannot carry", () => {
    const r = Rendezvous.local();
    expect(() => r.send("x", [1, 2] as unknown as Uint8Array)).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG }));
  });
});

describe("a rendezvous over a pipe", () => {
  const contexts: Context[] = [];
  afterEach(async () => {
    for (const c of contexts.splice(0)) await c.close();
  });

  async function pipePair(): Promise<[Pipe, Pipe]> {
    const server = await createContext({ transports: ["uv"], channels: ["basic"] });
    const client = await createContext({ transports: ["uv"], channels: ["basic"] });
    contexts.push(server, client);
    const listener = await server.listen("uv://127.0.0.1:0");
    return Promise.all([client.connect(listener.addresses()[0]!), listener.accept()]);
  }

  it("carries values both ways, recv before or after the send, with their types", async () => {
    const [a, b] = await pipePair();
    const left = Rendezvous.over(a);
    const right = Rendezvous.over(b);
    const early = right.recv("f32");
    left.send("f32", new Float32Array([1.5, -2]));
    left.send("big", new BigInt64Array([-(2n ** 60n)]));
    left.send("dv", new DataView(new Uint8Array([9, 8, 7]).buffer, 1, 2));
    left.send("buf", Buffer.from("hello"));
    right.send("back", new Int16Array([-3]));
    const f32 = await early;
    expect(f32).toBeInstanceOf(Float32Array);
    expect([...(f32 as Float32Array)]).toEqual([1.5, -2]);
    await left.flush();
    await new Promise((r) => setTimeout(r, 20));
    expect(right.pendingKeys().arrived.sort()).toEqual(["big", "buf", "dv"]);
    expect([...((await right.recv("big")) as BigInt64Array)]).toEqual([-(2n ** 60n)]);
    const dv = (await right.recv("dv")) as DataView;
    expect(dv).toBeInstanceOf(DataView);
    expect([dv.getUint8(0), dv.getUint8(1)]).toEqual([8, 7]);
    const buf = await right.recv("buf");
    expect(Buffer.isBuffer(buf) && buf.toString()).toBe("hello");
    expect([...((await left.recv("back")) as Int16Array)]).toEqual([-3]);
  });

  it("lands a value in the receiver's memory when recv came first", async () => {
    const [a, b] = await pipePair();
    const left = Rendezvous.over(a);
    const right = Rendezvous.over(b);
    const into = new Uint8Array(16 << 20);
    const p = right.recv("t", { into });
    left.send("t", patterned(16 << 20, 3));
    expect(await p).toBe(into);
    expect(hasPattern(into, 3)).toBe(true);
  });

  it("keeps a value that does not fit the memory given for the next recv", async () => {
    const [a, b] = await pipePair();
    const left = Rendezvous.over(a);
    const right = Rendezvous.over(b);
    const wrong = right.recv("t", { into: new Uint8Array(12) });
    left.send("t", patterned(16, 3));
    await expect(wrong).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    expect(hasPattern((await right.recv("t")) as Uint8Array, 3)).toBe(true);
  });

  it("matches 1000 keys sent and received in different orders", async () => {
    const [a, b] = await pipePair();
    const left = Rendezvous.over(a);
    const right = Rendezvous.over(b);
    const keys = Array.from({ length: 1000 }, (_, i) => `k${i}`);
    const received = [...keys]
      .reverse()
      .slice(0, 500)
      .map((k) => right.recv(k));
    for (const k of keys) left.send(k, new Uint32Array([Number(k.slice(1))]));
    received.push(
      ...[...keys]
        .reverse()
        .slice(500)
        .map((k) => right.recv(k)),
    );
    const values = await Promise.all(received);
    expect(values.map((v) => (v as Uint32Array)[0])).toEqual([...keys].reverse().map((k) => Number(k.slice(1))));
  });

  it("fails with ERR_TP_PROTOCOL on a message that is not a rendezvous value", async () => {
    const [a, b] = await pipePair();
    const right = Rendezvous.over(b);
    const waiting = right.recv("x");
    await a.write({ metadata: "not json", tensors: [{ buffer: new Uint8Array(4), targetDevice: CPU_DEVICE }] });
    await expect(waiting).rejects.toMatchObject({ code: ErrorCode.PROTOCOL });
    expect((await right.closed).code).toBe(ErrorCode.PROTOCOL);
  });

  it.each(["__proto__", "toString", "constructor"])("fails with ERR_TP_PROTOCOL on a value of type %s, a name of no view type", async (type) => {
    const [a, b] = await pipePair();
    const right = Rendezvous.over(b);
    await a.write({ metadata: JSON.stringify({ v: 1, key: "k", type }), tensors: [{ buffer: new Uint8Array(8), targetDevice: CPU_DEVICE }] });
    expect(await right.closed).toMatchObject({ code: ErrorCode.PROTOCOL, message: expect.stringMatching(new RegExp(`of unknown type "${type}"`)) });
  });

  it("keeps at most maxUnclaimed values, then ends with ERR_TP_PROTOCOL saying so; values waited for still come", async () => {
    const [a, b] = await pipePair();
    const left = Rendezvous.over(a);
    const right = Rendezvous.over(b, { maxUnclaimed: 100 });
    const waited = right.recv("wanted");
    for (let i = 0; i < 100; i++) left.send(`junk${i}`, new Uint8Array(0));
    left.send("wanted", new Uint8Array([1]));
    expect([...((await waited) as Uint8Array)]).toEqual([1]);
    left.send("one too many", new Uint8Array(0));
    const ended = await Promise.race([right.closed, new Promise((r) => setTimeout(() => r("still open after 10 s"), 10_000))]);
    expect(ended).toMatchObject({
      code: ErrorCode.PROTOCOL,
      message: expect.stringMatching(/100 values no recv\(\) has taken.*RendezvousOptions\.maxUnclaimed/),
    });
    // What came before the end is still there for the taking.
    expect(right.pendingKeys().arrived).toHaveLength(100);
    expect(await right.recv("junk7")).toHaveLength(0);
  });

  it("a recv with memory and a deadline that passes while its value lands: nothing lands there afterwards, and the next recv gets the whole value", async () => {
    const [a, b] = await pipePair();
    const left = Rendezvous.over(a);
    const right = Rendezvous.over(b);
    const size = 256 << 20;
    const into = new Uint8Array(size);
    const sent = patterned(size, 5);
    // Its descriptor comes within a few ms; its bytes take longer than that to land.
    const timedOut = right.recv("big", { into, timeout: 50 });
    left.send("big", sent);
    await expect(timedOut).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
    // The caller's memory is its own again: what it writes there stays.
    into.fill(0xaa);
    const value = (await right.recv("big", { timeout: 10_000 })) as Uint8Array;
    expect(into.every((x) => x === 0xaa)).toBe(true);
    expect(value).not.toBe(into);
    expect(hasPattern(value, 5)).toBe(true);
  });

  it("ends with ERR_TP_PROTOCOL on a key longer than maxKeyLength: unclaimed values hold their keys", async () => {
    const [a, b] = await pipePair();
    const left = Rendezvous.over(a);
    const right = Rendezvous.over(b, { maxKeyLength: 64 });
    left.send("k".repeat(64), new Uint8Array(1));
    left.send("\u001b[2J".repeat(100), new Uint8Array(0));
    const ended = await Promise.race([right.closed, new Promise((r) => setTimeout(() => r("still open after 10 s"), 10_000))]);
    expect(ended).toMatchObject({ code: ErrorCode.PROTOCOL, message: expect.stringMatching(/key of 400 characters .*RendezvousOptions\.maxKeyLength \(64\)/) });
    // The peer's key is quoted escaped and cut.
    expect((ended as Error).message).not.toContain("\u001b");
    expect(await right.recv("k".repeat(64))).toHaveLength(1);
  });

  it("takes a positive integer or Infinity for maxUnclaimed", async () => {
    const [, b] = await pipePair();
    for (const bad of [0, -5, 2.5, "9"]) {
      expect(() => Rendezvous.over(b, { maxUnclaimed: bad as number }), String(bad)).toThrow(
        expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(/maxUnclaimed must be a positive integer or Infinity/) }),
      );
    }
  });
});

describe("a rendezvous between two processes", () => {
  it("exchanges values, keeps what arrived after the peer dies, and rejects the rest", async () => {
    const server = await createContext({ transports: ["uv"], channels: ["basic"] });
    try {
      const listener = await server.listen("uv://127.0.0.1:0");
      const script = fileURLToPath(new URL("./fixtures/rendezvous-peer.mjs", import.meta.url));
      const child = spawn(process.execPath, [script, listener.addresses()[0]!, "5"], { stdio: ["ignore", "pipe", "inherit"] });
      const exited = once(child, "exit");
      const r = Rendezvous.over(await listener.accept());
      r.send("ping", new Float32Array([1, 2]));
      expect([...((await r.recv("pong")) as Float32Array)]).toEqual([2, 4]);
      const lines = createInterface({ input: child.stdout! });
      await once(lines, "line");
      const waiting = expect(r.recv("never-sent")).rejects.toMatchObject({
        code: expect.stringMatching(/^ERR_TP_(PEER_CLOSED|CONNECTION_RESET)$/),
        message: expect.stringContaining('no value for key "never-sent"'),
      });
      child.kill("SIGKILL");
      await exited;
      const t0 = performance.now();
      await waiting;
      expect(performance.now() - t0).toBeLessThan(1000);
      for (let i = 0; i < 5; i++) expect([...((await r.recv(`from-child/${i}`)) as Float64Array)]).toEqual([i, i * 0.5]);
      await expect(r.recv("from-child/5")).rejects.toMatchObject({ code: expect.stringMatching(/^ERR_TP_/) });
      expect(() => r.send("late", new Uint8Array(1))).toThrow(expect.objectContaining({ code: expect.stringMatching(/^ERR_TP_/) }));
    } finally {
      await server.close();
    }
  });
});
