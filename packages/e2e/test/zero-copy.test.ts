/**
 * Zero-copy between two processes of one machine (Pipe.loan() over shm +
 * cma): the reader's view is the writer's memory, a slot comes back only
 * when the reader releases it, a reader that never releases holds the
 * writer to its pool's bound, and where no channel lends a loan is plain
 * memory, copied.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { CPU_DEVICE, Context, ErrorCode, type Listener, type Pipe } from "@tensorpipe/core";
import { hasPattern, patterned } from "@tensorpipe/core/testing";
import { registerCmaChannel } from "@tensorpipe/channel-cma";
import { registerShmTransport } from "@tensorpipe/transport-shm";
import { registerUvTransport } from "@tensorpipe/transport-uv";
import { afterEach, describe, expect, it, vi } from "vitest";
import { createContext, spawnPeer } from "@tensorpipe/bench";

const MiB = 1024 * 1024;
const reader = fileURLToPath(new URL("./fixtures/lending-reader.mjs", import.meta.url));

describe("zero-copy between two processes", () => {
  const cleanup: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of cleanup.splice(0).reverse()) await c();
  });

  /** A writer here and lending-reader.mjs there, over cma and `transport` (shm, or TCP on this machine). */
  async function start(mode: "views" | "copy", poolBytes?: number, transport: "shm" | "uv" = "shm", inlineMax?: number): Promise<Pipe> {
    const context = new Context();
    registerShmTransport(context);
    registerUvTransport(context);
    registerCmaChannel(context, { poolBytes, inlineMax });
    cleanup.push(() => context.close());
    const listener: Listener = await context.listen(transport === "shm" ? "shm://" : "uv://127.0.0.1:0");
    const child: ChildProcess = spawn(process.execPath, [reader, listener.addresses()[0]!, mode], { stdio: ["ignore", "inherit", "inherit"] });
    cleanup.push(() => {
      child.kill();
    });
    const pipe = await listener.accept();
    expect([pipe.transport, pipe.channelFor(CPU_DEVICE, CPU_DEVICE)]).toEqual([transport, "cma"]);
    return pipe;
  }

  async function ask(pipe: Pipe, metadata: string, buffer?: Uint8Array): Promise<Record<string, unknown>> {
    await pipe.write({ metadata, tensors: buffer ? [{ buffer }] : [] });
    using m = await pipe.readMessage();
    return JSON.parse(m.metadata) as Record<string, unknown>;
  }

  it.each([
    ["shm", undefined],
    ["uv", undefined],
    // Set on this end only: each end cuts at its own size, and lends all the same.
    ["shm", 0],
    ["shm", 8 * MiB],
  ] as const)(
    "hands the reader the writer's memory over %s (inlineMax %s here): a byte it writes is seen once it released the slot, and never before",
    async (transport, inlineMax) => {
      const pipe = await start("views", undefined, transport, inlineMax);
      const loan = await pipe.loan(MiB);
      loan.set(patterned(MiB, 3));
      expect(await ask(pipe, "hold 3", loan)).toEqual({ pattern: true });
      // Sent: out of the writer's hands.
      expect(loan.byteLength).toBe(0);
      expect(await ask(pipe, "poke")).toEqual({ poked: true });
      // Held by the reader: a loan now is other memory, without the reader's byte.
      const kept = [await pipe.loan(MiB)];
      expect(kept[0]![0]).not.toBe(0xee);
      expect(await ask(pipe, "release")).toEqual({ released: 1, emptied: true });
      // Released (its word comes on the channel's own connection): the slot comes back, with the reader's byte.
      for (let i = 0; ; i++) {
        const again = await pipe.loan(MiB);
        if (again[0] === 0xee) break;
        kept.push(again);
        expect(i, "the released slot never came back").toBeLessThan(50);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
  );

  it("writes a loan once, through the pipe that lent it: through another, or again, ERR_TP_INVALID_ARG, and both pipes go on", async () => {
    const [lender, other] = [await start("views"), await start("views")];
    const loan = await lender.loan(8 * MiB);
    loan.set(patterned(8 * MiB, 4));
    // Through another pipe it would go by address from a slot its lender lends again.
    await expect(other.write({ tensors: [{ buffer: loan }] })).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(/tensor 0 is a loan of the pipe to .*: write it there, or send a copy \(loan\.slice\(\)\) through this pipe/),
    });
    // Again in the same turn, before the first write took it out of this side's hands.
    const first = ask(lender, "hold 4", loan);
    await expect(lender.write({ metadata: "again", tensors: [{ buffer: loan }] })).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(/tensor 0 is a loan written already/),
    });
    expect(await first).toEqual({ pattern: true });
    expect(await ask(other, "hold 5", patterned(MiB, 5))).toEqual({ pattern: true });
  });

  it("takes back a loan not written: its slot is lent again at once, with no collection", async () => {
    const pipe = await start("views", 2 * MiB);
    const dropped = await pipe.loan(2 * MiB);
    pipe.unloan(dropped);
    expect(dropped.byteLength).toBe(0);
    // The pool holds one slot: without unloan() this loan would wait for a collection of `dropped`.
    const loan = await pipe.loan(2 * MiB, { timeout: 500 });
    loan.set(patterned(2 * MiB, 6));
    expect(await ask(pipe, "hold 6", loan)).toEqual({ pattern: true });
    // A loan written already, and plain memory, are left as they are.
    pipe.unloan(loan);
    pipe.unloan(new Uint8Array(4));
    expect(() => pipe.unloan("loan" as never)).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(/unloan\(\) takes a Uint8Array that loan\(\) gave/) }),
    );
  });

  it("holds the writer to its pool's bound against a reader that never releases: a loan waits under its timeout, the pipe goes on", async () => {
    const pipe = await start("views", 4 * MiB);
    for (let seed = 0; seed < 2; seed++) {
      const loan = await pipe.loan(2 * MiB);
      loan.set(patterned(2 * MiB, seed));
      expect(await ask(pipe, `hold ${seed}`, loan)).toEqual({ pattern: true });
    }
    await expect(pipe.loan(2 * MiB, { timeout: 300 })).rejects.toMatchObject({
      code: ErrorCode.TIMEOUT,
      message: expect.stringMatching(/pool's 4194304 bytes are taken: 4194304 by messages the peer has not released/),
    });
    expect(pipe.stats().errors).toEqual({ [ErrorCode.TIMEOUT]: 1 });
    await expect(pipe.loan(8 * MiB)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(/poolBytes/) });
    expect(pipe.stats().errors).toEqual({ [ErrorCode.TIMEOUT]: 1, [ErrorCode.INVALID_ARG]: 1 });
    // The pipe is as it was: messages of plain memory go on.
    expect(await ask(pipe, "length", new Uint8Array(5 * MiB))).toEqual({ length: 5 * MiB });
    const waiting = pipe.loan(2 * MiB, { timeout: 5000 });
    expect(await ask(pipe, "release")).toEqual({ released: 2, emptied: true });
    expect((await waiting).byteLength).toBe(2 * MiB);
  });

  it("makes a loan's deadline only when it has to wait: one served at once starts no timer", async () => {
    const pipe = await start("views", 4 * MiB);
    const timers = vi.spyOn(globalThis, "setTimeout");
    try {
      const loan = await pipe.loan(2 * MiB, { timeout: 987_654, signal: new AbortController().signal });
      loan.set(patterned(2 * MiB, 7));
      expect(await ask(pipe, "hold 7", loan)).toEqual({ pattern: true });
      expect(timers.mock.calls.filter((c) => (c[1] ?? 0) > 900_000)).toEqual([]);
      // The reader holds one slot and this side the other (to the end: a loan
      // dropped is collected and its slot lent again): the next loan waits, under its deadline.
      const second = await pipe.loan(2 * MiB);
      await expect(pipe.loan(2 * MiB, { timeout: 987_654, signal: AbortSignal.timeout(200) })).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
      expect(timers.mock.calls.filter((c) => (c[1] ?? 0) > 900_000)).toHaveLength(1);
      expect(second.byteLength).toBe(2 * MiB);
    } finally {
      timers.mockRestore();
    }
    await expect(pipe.loan(MiB, { signal: AbortSignal.abort() })).rejects.toMatchObject({ code: ErrorCode.ABORTED });
    await expect(pipe.loan(MiB, { timeout: -1 })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    for (const length of [-1, 1.5, 2 ** 53]) {
      await expect(pipe.loan(length)).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
        message: expect.stringMatching(/^loan length must be a whole number of bytes from 0 to 9007199254740991, got number /),
      });
    }
  });

  it("leaves a loan not written when its pipe closes as memory of this process: it cannot be written, there or elsewhere", async () => {
    const [pipe, other] = [await start("views"), await start("views")];
    const loan = await pipe.loan(MiB);
    loan.set(patterned(MiB, 8));
    pipe.close();
    await pipe.closed.catch(() => undefined);
    expect(hasPattern(loan, 8)).toBe(true);
    await expect(pipe.write({ tensors: [{ buffer: loan }] })).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    await expect(other.write({ tensors: [{ buffer: loan }] })).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(/tensor 0 is a loan of the pipe to .*: write it there, or send a copy \(loan\.slice\(\)\)/),
    });
    expect(await ask(other, "hold 8", loan.slice())).toEqual({ pattern: true });
  });

  it("lands a lent tensor in memory the reader gave, freeing its slot at once", async () => {
    const pipe = await start("copy", 4 * MiB);
    for (let seed = 0; seed < 12; seed++) {
      const size = MiB + seed * 77_777;
      const loan = await pipe.loan(size, { timeout: 5000 });
      loan.set(patterned(size, seed));
      expect(await ask(pipe, String(seed), loan)).toEqual({ pattern: true });
    }
  });

  it("gives plain memory where no channel lends (uv + basic), copied as any tensor", async () => {
    const peer = await spawnPeer();
    cleanup.push(() => peer.stop());
    const context = await createContext({ transports: ["uv"], channels: ["basic"] });
    cleanup.push(() => context.close());
    const pipe = await context.connect(peer.url);
    await expect(pipe.loan(2 ** 33)).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(/a loan of 8589934592 bytes cannot be had/),
    });
    const loan = await pipe.loan(3 * MiB);
    loan.set(patterned(3 * MiB, 9));
    await pipe.write({ tensors: [{ buffer: loan, targetDevice: CPU_DEVICE }] });
    const m = await pipe.readMessage();
    expect(hasPattern(m.tensors[0]!.buffer, 9)).toBe(true);
    // Copied: the loan is still the writer's.
    expect(loan.byteLength).toBe(3 * MiB);
    pipe.close();
  });
});
