import { type Connection, ErrorCode, NopWriter, type TensorLanding } from "@tensorpipe/core/backend";
import { hasPattern, patterned } from "@tensorpipe/core/testing";
import { execFileSync } from "node:child_process";
import { fstatSync, readFileSync } from "node:fs";
import { setFlagsFromString } from "node:v8";
import { Worker } from "node:worker_threads";
import { runInNewContext } from "node:vm";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type CmaChannel, CmaChannelContext } from "../src/index.js";
import { loadAddon } from "../src/native.js";
import { PeerSegments } from "../src/peer-segments.js";
import { SharedPool } from "../src/shared-pool.js";
import { connectionPairs } from "./connections.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const KiB = 1024;
const MiB = 1024 * KiB;

/** A landing that keeps what the channel gave: a view lent, or memory made for a copy. */
function landing(): TensorLanding & { view?: Uint8Array; made?: Uint8Array; release?: () => void } {
  const l: TensorLanding & { view?: Uint8Array; made?: Uint8Array; release?: () => void } = {
    make: () => (l.made = new Uint8Array(l.length)),
    adopt: (view, release) => {
      l.view = view;
      l.release = release;
    },
    length: 0,
  } as never;
  return l;
}

/** A loan of `length` taken after a collection, or undefined when none comes within 20 ms. */
async function loanAfterCollection(writer: CmaChannel, length: number): Promise<number | undefined> {
  gc();
  await new Promise((r) => setTimeout(r, 10));
  return (await writer.loan(length, { timeout: 20 })?.catch(() => undefined))?.byteLength;
}

describe("cma shared pool", () => {
  const open: Connection[] = [];
  const channels: CmaChannel[] = [];
  afterEach(() => {
    for (const c of channels.splice(0)) c.close();
    for (const c of open.splice(0)) c.close();
  });

  async function pair(options = {}): Promise<{ writer: CmaChannel; reader: CmaChannel; raw: Connection[]; accepted: Connection[] }> {
    const { here, there: accepted } = await connectionPairs(open);
    const make = (conns: Connection[]) => {
      const context = new CmaChannelContext(options);
      const c = context.createChannel(conns, "connect", { transportMedium: "network", peerWireExtension: context.wireExtension() }) as CmaChannel;
      channels.push(c);
      return c;
    };
    return { writer: make(here), reader: make(accepted), raw: here, accepted };
  }

  async function receive(reader: CmaChannel, length: number) {
    const l = landing();
    (l as unknown as { length: number }).length = length;
    await reader.recvLent!(length, l);
    return l;
  }

  /** `count` loans of `length` sent, the reader holding each as received. */
  async function lendAndHold(writer: CmaChannel, reader: CmaChannel, count: number, length: number) {
    const held = [];
    for (let i = 0; i < count; i++) {
      const loan = (await writer.loan(length, undefined))!;
      await writer.send(loan, loan.length);
      held.push(await receive(reader, length));
    }
    return held;
  }

  it("lends where both ends can, and says so in its wire extension; up to 64 KiB it leaves the pipe to give plain memory", async () => {
    expect(new CmaChannelContext().wireExtension()).toMatch(/^inline:auto;per-end;pool;net:\d+$/);
    const { writer } = await pair();
    expect(writer.loan(64 * KiB, undefined)).toBeUndefined();
    expect((await writer.loan(64 * KiB + 1, undefined))!.byteLength).toBe(64 * KiB + 1);
  });

  it("hands the reader the writer's own memory: a byte the reader writes is the writer's, seen only once the slot is released", async () => {
    const { writer, reader } = await pair();
    const loan = (await writer.loan(MiB, undefined))!;
    loan.set(patterned(MiB, 7));
    await writer.send(loan, MiB);
    // The write took the loan out of the writer's hands.
    expect(loan.byteLength).toBe(0);
    const got = await receive(reader, MiB);
    expect(got.made).toBeUndefined();
    expect(hasPattern(got.view!, 7)).toBe(true);
    got.view![0] = 0xab;
    // While the reader holds it, no loan hands that memory out again.
    const other = (await writer.loan(MiB, undefined))!;
    expect(other[0]).not.toBe(0xab);
    other[0] = 0xcd;
    expect(got.view![0]).toBe(0xab);
    got.release!();
    expect(got.view!.byteLength).toBe(0);
    // Released: the next loan of that size is the slot the reader had, with the byte it wrote.
    await expect
      .poll(async () => {
        const again = (await writer.loan(MiB, undefined))!;
        return again[0];
      })
      .toBe(0xab);
  });

  it("keeps tensors in order when receives are asked for at once and some wait for their header", async () => {
    const { writer, reader } = await pair();
    // Past 64 KiB a header comes first (inline up to 128 KiB over TCP, by address past it, by place when lent).
    const sizes = [100 * KiB, 10, 200 * KiB, 70 * KiB, 5, 0, 90 * KiB, 1000, 300 * KiB, 64 * KiB];
    const lent = await writer.loan(150 * KiB, undefined);
    lent!.set(patterned(150 * KiB, 99));
    const sent = [...sizes.map((n, i) => writer.send(patterned(n, i), n)), writer.send(lent!, 150 * KiB)];
    const targets = sizes.map((n) => new Uint8Array(n));
    const got = [...sizes.map((n, i) => reader.recv(targets[i]!, n)), receive(reader, 150 * KiB)];
    await Promise.all([...sent, ...got]);
    sizes.forEach((n, i) => expect(hasPattern(targets[i]!, i), `tensor ${i} of ${n} bytes`).toBe(true));
    expect(hasPattern((await got.at(-1)!)!.view!, 99)).toBe(true);
  });

  it("gives back more slots at once than one release frame names", async () => {
    const { writer, reader } = await pair();
    const views = [];
    for (let i = 0; i < 600; i++) {
      const loan = (await writer.loan(65 * KiB, undefined))!;
      await writer.send(loan, loan.length);
      views.push(await receive(reader, 65 * KiB));
    }
    for (const v of views) v.release!();
    const pool = (writer as unknown as { pool: { lent: number } }).pool;
    await expect.poll(() => pool.lent).toBe(0);
  });

  it("gives back a loan dropped unsent, once it is collected", async () => {
    const { writer } = await pair({ poolBytes: 2 * MiB });
    await (async () => {
      (await writer.loan(2 * MiB, undefined))![0] = 1;
    })();
    await expect.poll(() => loanAfterCollection(writer, 2 * MiB)).toBe(2 * MiB);
  });

  it("sends two tensors cut from one loan, and frees the slot once both are released", async () => {
    const { writer, reader } = await pair({ poolBytes: 2 * MiB });
    const loan = (await writer.loan(2 * MiB, undefined))!;
    loan.set(patterned(2 * MiB, 4));
    await Promise.all([writer.send(loan.subarray(0, MiB), MiB), writer.send(loan.subarray(MiB), MiB)]);
    const [a, b] = [await receive(reader, MiB), await receive(reader, MiB)];
    const whole = new Uint8Array(2 * MiB);
    whole.set(a.view!, 0);
    whole.set(b.view!, MiB);
    expect(hasPattern(whole, 4)).toBe(true);
    expect(loan.byteLength).toBe(0);
    a.release!();
    const pool = (writer as unknown as { pool: { lent: number } }).pool;
    await new Promise((r) => setTimeout(r, 20));
    expect(pool.lent).toBe(1);
    b.release!();
    await expect.poll(() => pool.lent).toBe(0);
  });

  it("sizes a slot past 2 MiB to the next 2 MiB, and a pool under 2 MiB to itself", async () => {
    {
      const { writer } = await pair({ poolBytes: 48 * MiB });
      // A power of two would have taken 64 MiB.
      expect((await writer.loan(33 * MiB, { timeout: 1000 }))!.byteLength).toBe(33 * MiB);
      expect((await writer.loan(12 * MiB, { timeout: 1000 }))!.byteLength).toBe(12 * MiB);
    }
    {
      const { writer } = await pair({ poolBytes: MiB });
      expect((await writer.loan(100 * KiB, { timeout: 1000 }))!.byteLength).toBe(100 * KiB);
    }
  });

  it("says who holds the pool when a loan waits: the peer's messages, and this side's unsent loans", async () => {
    const { writer, reader } = await pair({ poolBytes: 4 * MiB });
    const sent = (await writer.loan(2 * MiB, undefined))!;
    await writer.send(sent, sent.length);
    const held = await receive(reader, 2 * MiB);
    const kept = await writer.loan(2 * MiB, undefined);
    await expect(writer.loan(2 * MiB, { timeout: 30 })).rejects.toMatchObject({
      code: ErrorCode.TIMEOUT,
      message: expect.stringMatching(/4194304 bytes are taken: 2097152 by messages the peer has not released, 2097152 by loans of this side not yet written/),
    });
    held.release!();
    expect(kept!.byteLength).toBe(2 * MiB);
  });

  it("says who holds the pool when the wait ends, not when it began", async () => {
    const { writer, reader } = await pair({ poolBytes: 4 * MiB });
    const held = await lendAndHold(writer, reader, 2, 2 * MiB);
    const first = writer.loan(2 * MiB, undefined)!;
    const second = writer.loan(2 * MiB, { timeout: 100 });
    // The first waiter takes the slot released: the pool is half the peer's, half an unsent loan's.
    held[0]!.release!();
    await first;
    await expect(second).rejects.toMatchObject({
      code: ErrorCode.TIMEOUT,
      message: expect.stringMatching(/taken: 2097152 by messages the peer has not released, 2097152 by loans of this side not yet written/),
    });
  });

  it("gives back segments idle for 5 s, at both ends, and maps them again when they come back", async () => {
    const { writer, reader } = await pair();
    const loan = (await writer.loan(MiB, undefined))!;
    // The segment's mappings, by its memfd's inode: the writer's and the reader's.
    const { fd } = (writer as unknown as { pool: { segments: { fd: number }[] } }).pool.segments[0]!;
    const inode = String(fstatSync(fd).ino);
    // Mappings go with their segment's last view: each count comes after a collection.
    const mappings = () => {
      gc();
      return readFileSync("/proc/self/maps", "utf8")
        .split("\n")
        .filter((l) => l.split(/\s+/)[4] === inode).length;
    };
    await writer.send(loan, MiB);
    (await receive(reader, MiB)).release!();
    expect(mappings()).toBe(2);
    await expect.poll(mappings, { timeout: 15_000, interval: 500 }).toBe(0);
    const again = (await writer.loan(MiB, undefined))!;
    again.set(patterned(MiB, 6));
    await writer.send(again, MiB);
    const got = await receive(reader, MiB);
    expect(hasPattern(got.view!, 6)).toBe(true);
    got.release!();
  });

  it("goes with a worker terminated while it holds views and an unsent loan: no crash, no mapping left", async () => {
    const mappings = () =>
      readFileSync("/proc/self/maps", "utf8")
        .split("\n")
        .filter((l) => l.includes("tensorpipe-js pool")).length;
    gc();
    const before = mappings();
    for (let round = 0; round < 3; round++) {
      const workers = Array.from({ length: 4 }, () => new Worker(new URL("./workers/lender.mjs", import.meta.url)));
      const said = await Promise.all(workers.map((w) => new Promise((resolve, reject) => w.once("message", resolve).once("error", reject))));
      expect(said[0]).toEqual({ held: 20, last: 19, unsent: 4 << 20 });
      await Promise.all(workers.map((w) => w.terminate()));
    }
    gc();
    expect(mappings()).toBeLessThanOrEqual(before);
  });

  it("copies a lent tensor into memory the reader gave, and frees the slot at once", async () => {
    const { writer, reader } = await pair({ poolBytes: 2 * MiB });
    for (let i = 0; i < 8; i++) {
      const loan = (await writer.loan(2 * MiB - 1, undefined))!;
      loan.set(patterned(2 * MiB - 1, i));
      const target = new Uint8Array(2 * MiB - 1);
      await Promise.all([writer.send(loan, loan.length), reader.recv(target, target.length)]);
      expect(hasPattern(target, i)).toBe(true);
    }
  });

  it("holds the writer to its bound against a reader that never releases: a loan waits, under its signal", async () => {
    const { writer, reader } = await pair({ poolBytes: 4 * MiB });
    const held = await lendAndHold(writer, reader, 2, 2 * MiB);
    await expect(writer.loan(2 * MiB, { timeout: 50 })).rejects.toMatchObject({
      code: ErrorCode.TIMEOUT,
      message: expect.stringMatching(/shared pool's 4194304 bytes are taken: 4194304 by messages the peer has not released/),
    });
    const waiting = writer.loan(2 * MiB, undefined)!;
    held[1]!.release!();
    expect((await waiting).byteLength).toBe(2 * MiB);
    await expect(writer.loan(8 * MiB, undefined)).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(
        /takes a slot of 8388608, more than the pipe's shared pool \(4194304 bytes\): raise CmaChannelOptions.poolBytes \(to at most 1073741824\)/,
      ),
    });
    await expect(writer.loan(2 ** 40, undefined)).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(
        /: no pool holds that \(CmaChannelOptions.poolBytes is at most 1073741824\), or write the tensor from memory of your own$/,
      ),
    });
  });

  // Node 21 on has ArrayBuffer.prototype.transfer() by default (Node 20
  // behind a flag): it would move a slot's memory past release, into a
  // buffer that sees the messages lent there later.
  it("refuses transfer() of a loan's buffer and of a lent view's, where Node has it", () => {
    const fixture = new URL("./fixtures/transfer-lent.mjs", import.meta.url);
    const out = execFileSync(process.execPath, ["--harmony-rab-gsab-transfer", fixture.pathname], { encoding: "utf8" });
    expect(JSON.parse(out)).toEqual({
      transferExists: "function",
      onLoan: ErrorCode.INVALID_ARG,
      onView: ErrorCode.INVALID_ARG,
      intact: true,
      released: 0,
    });
  });

  it("gives back a view the reader dropped, once it is collected", async () => {
    const { writer, reader } = await pair({ poolBytes: 2 * MiB });
    const loan = (await writer.loan(2 * MiB, undefined))!;
    await writer.send(loan, loan.length);
    await receive(reader, 2 * MiB);
    await expect.poll(() => loanAfterCollection(writer, 2 * MiB)).toBe(2 * MiB);
  });

  it("refuses a place in a segment that is not a sealed memfd, and one past its segment's end", async () => {
    const place = (fd: number, offset: number, length: number) =>
      new NopWriter().structure(7).uint(process.pid).uint(1).uint(fd).uint(offset).uint(length).uint(0).uint(0).finish();
    {
      const { reader, raw } = await pair();
      // fd 0 is this process's stdin: not a sealed memfd.
      await raw[0]!.write([place(0, 0, MiB)]);
      await expect(receive(reader, MiB)).rejects.toMatchObject({ code: ErrorCode.PROTOCOL, message: expect.stringMatching(/not a sealed memfd/) });
    }
    {
      const { writer, reader, raw } = await pair();
      const loan = (await writer.loan(MiB, undefined))!;
      // The writer's segment, honestly announced once, then a place past its end.
      await writer.send(loan, MiB);
      const got = await receive(reader, MiB);
      got.release!();
      const fds = (writer as unknown as { pool: { segments: { fd: number; id: number }[] } }).pool.segments;
      await raw[0]!.write([
        new NopWriter()
          .structure(7)
          .uint(process.pid)
          .uint(fds[0]!.id)
          .uint(fds[0]!.fd)
          .uint(2 * MiB)
          .uint(MiB)
          .uint(0)
          .uint(1)
          .finish(),
      ]);
      await expect(receive(reader, MiB)).rejects.toMatchObject({
        code: ErrorCode.PROTOCOL,
        message: expect.stringMatching(/bytes at 2097152 of a pool segment of 2097152/),
      });
    }
  });

  it("refuses a segment whose memory the writer has not allocated: mapping it would cost the reader", async () => {
    const { reader, raw } = await pair();
    const [id, fd] = loadAddon().addon!.createSegment(64 * MiB, true);
    await raw[0]!.write([new NopWriter().structure(7).uint(process.pid).uint(id).uint(fd).uint(0).uint(MiB).uint(0).uint(0).finish()]);
    await expect(receive(reader, MiB)).rejects.toMatchObject({
      code: ErrorCode.PROTOCOL,
      message: expect.stringMatching(/whose memory it has not all allocated/),
    });
    loadAddon().addon!.closeSegment(id);
  });

  it("treats a release of a slot the reader does not hold as a protocol error", async () => {
    const { writer, reader } = await pair();
    const loan = (await writer.loan(MiB, undefined))!;
    await writer.send(loan, MiB);
    const got = await receive(reader, MiB);
    // On the reader's answers' connection: a release of slot 1, which it never got.
    const f = new Uint8Array(9);
    new DataView(f.buffer).setUint32(1, 1, true);
    await (reader as unknown as { acks: Connection }).acks.write([f]);
    const ended = await (writer as unknown as { descriptors: Connection }).descriptors.closed;
    expect(ended).toMatchObject({ code: ErrorCode.PROTOCOL, message: expect.stringMatching(/released pool slot 1 \(generation 0\), which it does not hold/) });
    got.release!();
  });
});

describe("cma shared pool's growth", () => {
  const pools: SharedPool[] = [];
  afterEach(() => {
    for (const p of pools.splice(0)) p.close(new Error("test over"));
  });

  /** A pool (of 2 MiB slots below, a slot a segment: its bytes count the slots it made). */
  function pool(takeArrived?: () => void): SharedPool & { bytes: number } {
    const p = new SharedPool(loadAddon().addon!, 64 * MiB, takeArrived);
    pools.push(p);
    return p as SharedPool & { bytes: number };
  }

  /** Lends a slot and sends it: what the peer is told of it. */
  async function sendOne(p: SharedPool) {
    return p.send(await p.loan(2 * MiB, undefined))!;
  }

  it("does not grow for a release on its way: a loan made as the peer answers takes the slot the release frees", async () => {
    const p = pool();
    const first = await sendOne(p);
    // The loan a front makes as the answer comes, the release read a moment later.
    const next = p.loan(2 * MiB, undefined);
    p.released(first.slot, first.generation);
    expect((await next).byteLength).toBe(2 * MiB);
    expect(p.bytes).toBe(2 * MiB);
  });

  it("takes the releases that have arrived before it grows", async () => {
    let arrived: (() => void) | undefined;
    const p = pool(() => arrived?.());
    const first = await sendOne(p);
    arrived = () => p.released(first.slot, first.generation);
    expect((await p.loan(2 * MiB, undefined)).byteLength).toBe(2 * MiB);
    expect(p.bytes).toBe(2 * MiB);
  });

  it("does not grow while releases keep arriving: a turn with bytes unread from the peer is not the end of its patience", async () => {
    // Bytes wait unread for two turns; the release is among what the second take reads.
    let unread = 2;
    let takes = 0;
    let release: (() => void) | undefined;
    const p = new SharedPool(
      loadAddon().addon!,
      64 * MiB,
      () => {
        if (release && ++takes === 2) release();
      },
      () => unread-- > 0,
    );
    pools.push(p);
    const first = await sendOne(p);
    release = () => p.released(first.slot, first.generation);
    const next = p.loan(2 * MiB, undefined);
    expect((await next).byteLength).toBe(2 * MiB);
    expect(p.bytes).toBe(2 * MiB);
  });

  it("numbers its slots again once their segments go: a pool that trades sizes keeps a table of what it held", async () => {
    // 4 MiB: a segment of 128 KiB slots and one 4 MiB slot cannot both be held, so each loan drops the other's.
    const p = new SharedPool(loadAddon().addon!, 4 * MiB);
    pools.push(p);
    for (let i = 0; i < 100; i++) {
      for (const length of [100 * 1024, 3 * MiB]) {
        const sent = p.send(await p.loan(length, undefined))!;
        p.released(sent.slot, sent.generation);
      }
    }
    expect((p as unknown as { slots: unknown[] }).slots.length).toBeLessThanOrEqual(17);
  });

  it("makes a patient loan's deadline only once its patience ends: served by a release in its turn, it starts no timer", async () => {
    const timers = vi.spyOn(globalThis, "setTimeout");
    try {
      const p = pool();
      const first = await sendOne(p);
      const next = p.loan(2 * MiB, { timeout: 987_654 });
      p.released(first.slot, first.generation);
      expect((await next).byteLength).toBe(2 * MiB);
      expect(timers.mock.calls.filter((c) => (c[1] ?? 0) > 900_000)).toEqual([]);
    } finally {
      timers.mockRestore();
    }
    // At its bound past its patience, it waits what is left of its timeout, from when it was asked.
    const small = new SharedPool(loadAddon().addon!, 2 * MiB);
    pools.push(small);
    small.send(await small.loan(2 * MiB, undefined));
    const asked = performance.now();
    await expect(small.loan(2 * MiB, { timeout: 150 })).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
    expect(performance.now() - asked).toBeLessThan(400);
  });

  it("grows once the turn ends without a release: slots the peer keeps are its to keep", async () => {
    const p = pool();
    await sendOne(p);
    let lent = false;
    const next = p.loan(2 * MiB, undefined).then((v) => {
      lent = true;
      return v;
    });
    await Promise.resolve();
    expect(lent).toBe(false);
    expect((await next).byteLength).toBe(2 * MiB);
    expect(p.bytes).toBe(4 * MiB);
  });
});

describe("cma shared pool's releases", () => {
  it("go to the writer at once, each in a frame of its own: before the answer the reader writes next", () => {
    const addon = loadAddon().addon!;
    const [segment, fd] = addon.createSegment(2 * MiB);
    // This process as its own peer: its pidfd takes its own segment.
    const pidfd = addon.pinProcess(process.pid);
    const frames: Uint8Array[] = [];
    const segments = new PeerSegments(addon, 64 * MiB, (f) => frames.push(f));
    try {
      const place = (slot: number) => ({ segment, fd, offset: slot * MiB, length: MiB, slot, generation: 7 });
      const [a, b] = [segments.view(pidfd, place(0)), segments.view(pidfd, place(1))];
      a.release();
      expect(frames.map((f) => [...f])).toEqual([[0, 0, 0, 0, 0, 7, 0, 0, 0]]);
      b.release();
      expect(frames.map((f) => [...f])).toEqual([
        [0, 0, 0, 0, 0, 7, 0, 0, 0],
        [0, 1, 0, 0, 0, 7, 0, 0, 0],
      ]);
      // A view reads as empty once released.
      expect(a.view.byteLength).toBe(0);
    } finally {
      segments.close();
      addon.closeSegment(segment);
      addon.unpinProcess(pidfd);
    }
  });
});
