/**
 * Deadlines hold through garbage collections. On Node 20 a full GC
 * collects an AbortSignal.timeout() merged with AbortSignal.any(), and its
 * timer with it (nodejs/node#57736): an operation that leant on one waited
 * for ever against a peer that says nothing. Each deadline here is played
 * against such a peer, with a full GC every few milliseconds.
 */
import { type Server, createServer } from "node:net";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { CPU_DEVICE, type Context, ErrorCode } from "@tensorpipe/core";
import { afterEach, describe, expect, it } from "vitest";
import { closedAfterEach } from "../contexts.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

const { context, closeLater } = closedAfterEach();

/** A full GC every 10 ms for as long as the test runs. */
let collecting: NodeJS.Timeout | undefined;
function collectGarbage(): void {
  collecting = setInterval(gc, 10);
}
afterEach(() => clearInterval(collecting));

/** A TCP listener that takes connections and never says a byte. */
async function silentListener(): Promise<string> {
  const held: import("node:net").Socket[] = [];
  const server: Server = createServer((s) => held.push(s.on("error", () => undefined)));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closeLater(() => {
    for (const s of held) s.destroy();
    server.close();
  });
  return `uv://127.0.0.1:${(server.address() as { port: number }).port}`;
}

/** How long `p` took to reject, and with what. */
async function rejectsWithin(p: Promise<unknown>, ms: number): Promise<{ code: string; after: number }> {
  const started = performance.now();
  const outcome = await Promise.race([
    p.then(
      () => ({ code: "resolved" }),
      (e: { code: string }) => ({ code: e.code }),
    ),
    new Promise<{ code: string }>((r) => setTimeout(() => r({ code: "still pending" }), ms)),
  ]);
  return { code: outcome.code, after: performance.now() - started };
}

/** A pipe between two contexts of this process over uv + basic. */
async function pipePair(): Promise<{ client: Context; pipe: import("@tensorpipe/core").Pipe; peer: import("@tensorpipe/core").Pipe }> {
  const server = await context({ transports: ["uv"], channels: ["basic"] });
  const client = await context({ transports: ["uv"], channels: ["basic"] });
  const listener = await server.listen("uv://127.0.0.1:0");
  const [pipe, peer] = await Promise.all([client.connect(listener.url()), listener.accept()]);
  return { client, pipe, peer };
}

describe("deadlines through garbage collections", () => {
  it("connect({ timeout }) to a listener that never answers rejects with ERR_TP_TIMEOUT on time", async () => {
    const url = await silentListener();
    const client = await context({ transports: ["uv"], channels: ["basic"] });
    collectGarbage();
    expect((await rejectsWithin(client.connect(url, { timeout: 300 }), 3000)).code).toBe(ErrorCode.TIMEOUT);
  });

  it("connect() under the context's handshakeTimeout, with a signal beside it, rejects on time", async () => {
    const url = await silentListener();
    const client = await context({ transports: ["uv"], channels: ["basic"], handshakeTimeout: 300 });
    const never = new AbortController();
    collectGarbage();
    const { code, after } = await rejectsWithin(client.connect(url, { signal: never.signal }), 3000);
    expect(code).toBe(ErrorCode.TIMEOUT);
    expect(after).toBeLessThan(2500);
  });

  it("after 40 connects that hung to their deadlines, the context still connects to a healthy listener", async () => {
    const url = await silentListener();
    const client = await context({ transports: ["uv"], channels: ["basic"] });
    collectGarbage();
    const hung = await Promise.all(Array.from({ length: 40 }, () => rejectsWithin(client.connect(url, { timeout: 300 }), 5000)));
    // The context dials 32 at a time: the last 8 waited their turn, their deadlines running.
    expect(hung.map((h) => h.code)).toEqual(Array(40).fill(ErrorCode.TIMEOUT));
    const server = await context({ transports: ["uv"], channels: ["basic"] });
    const listener = await server.listen("uv://127.0.0.1:0");
    const pipe = await client.connect(listener.url(), { timeout: 3000 });
    expect(pipe.transport).toBe("uv");
  });

  it("readDescriptor({ signal, timeout }) with nothing to read rejects with ERR_TP_TIMEOUT on time", async () => {
    const { pipe } = await pipePair();
    const never = new AbortController();
    collectGarbage();
    const { code, after } = await rejectsWithin(pipe.readDescriptor({ signal: never.signal, timeout: 300 }), 3000);
    expect(code).toBe(ErrorCode.TIMEOUT);
    expect(after).toBeLessThan(2500);
    // Nothing was consumed: a wait for a descriptor leaves the pipe open.
    expect(pipe.isClosed).toBe(false);
  });

  it("readMessage({ signal, timeout }) whose message never comes rejects on time", async () => {
    const { pipe } = await pipePair();
    const never = new AbortController();
    collectGarbage();
    expect((await rejectsWithin(pipe.readMessage({ signal: never.signal, timeout: 300 }), 3000)).code).toBe(ErrorCode.TIMEOUT);
  });

  it("a write({ signal, timeout }) the peer never reads rejects on time", async () => {
    const { pipe } = await pipePair();
    const never = new AbortController();
    collectGarbage();
    const big = new Uint8Array(64 << 20);
    const write = pipe.write({ tensors: [{ buffer: big, targetDevice: CPU_DEVICE }] }, { signal: never.signal, timeout: 300 });
    expect((await rejectsWithin(write, 3000)).code).toBe(ErrorCode.TIMEOUT);
  });

  it("accept({ signal, timeout }) with no peer coming rejects on time", async () => {
    const server = await context({ transports: ["uv"], channels: ["basic"] });
    const listener = await server.listen("uv://127.0.0.1:0");
    const never = new AbortController();
    collectGarbage();
    const { code, after } = await rejectsWithin(listener.accept({ signal: never.signal, timeout: 300 }), 3000);
    expect(code).toBe(ErrorCode.TIMEOUT);
    expect(after).toBeLessThan(2500);
  });
});
