import { type Connection, ErrorCode, NopReader, NopWriter, type TransportMedium } from "@tensorpipe/core/backend";
import { hasPattern, patterned } from "@tensorpipe/core/testing";
import { readFileSync, statSync } from "node:fs";
import { afterEach, describe, expect, it, vi } from "vitest";
import { type CmaChannel, CmaChannelContext, defaultInlineMax } from "../src/index.js";
import { loadAddon } from "../src/native.js";
import { connectionPairs } from "./connections.js";

const MiB = 1024 * 1024;
/** How this process's wire extension names its network namespace. */
const NET = `;net:${statSync("/proc/self/ns/net").ino}`;
const HUGE_PAGE = 2 * MiB;

/** KiB of [address, address + length) that sit in huge pages, from /proc/self/smaps. */
function hugeKiB(address: bigint, length: number): number {
  let kib = 0;
  for (const vma of readFileSync("/proc/self/smaps", "utf8").split(/\n(?=[0-9a-f]+-[0-9a-f]+ )/)) {
    const [begin, end] = vma
      .slice(0, vma.indexOf(" "))
      .split("-")
      .map((h) => BigInt(`0x${h}`));
    if (begin! >= address + BigInt(length) || end! <= address) continue;
    kib += Number(/AnonHugePages:\s+(\d+)/.exec(vma)?.[1] ?? 0);
  }
  return kib;
}

const thp = (() => {
  try {
    return readFileSync("/sys/kernel/mm/transparent_hugepage/enabled", "utf8");
  } catch {
    return "";
  }
})();

describe("cma channel", () => {
  const open: Connection[] = [];
  afterEach(() => {
    for (const c of open.splice(0)) c.close();
  });

  /** Two connected pairs: [here, there] for descriptors and for acks. */
  const connections = () => connectionPairs(open);

  /** A channel between two tensorpipe-js ends, as negotiation makes it (the peer's wire extension is its own). */
  function between(context: CmaChannelContext, conns: Connection[], transportMedium: TransportMedium = "network") {
    return context.createChannel(conns, "connect", { transportMedium, peerWireExtension: context.wireExtension() }) as CmaChannel;
  }

  function channel(conns: Connection[], options = {}) {
    return between(new CmaChannelContext({ inlineMax: 0, ...options }), conns);
  }

  const source = (pid: number, address: bigint, length: number) => new NopWriter().structure(3).uint(pid).uint(address).uint(length).finish();

  it("is viable here and describes machine, pid and user namespaces, user, group and capabilities as upstream does", () => {
    const ctx = new CmaChannelContext();
    expect(ctx.isViable()).toEqual({ viable: true });
    const [d] = ctx.deviceDescriptors();
    expect(d!.device).toEqual({ type: "cpu", index: 0 });
    expect(d!.descriptor).toMatch(
      new RegExp(`^cma:[0-9a-f-]{36}_[0-9a-f]+_[0-9a-f]+_[0-9a-f]+_[0-9a-f]+_${process.getuid!()}_${process.getgid!()}(_[0-9a-f]+)?$`),
    );
    expect(ctx.wireExtension()).toBe(`inline:auto;per-end;pool${NET}`);
  });

  it("says which part of two descriptors differs, and what would make them pair", () => {
    const ctx = new CmaChannelContext();
    const here = ctx.deviceDescriptors()[0]!.descriptor;
    const [boot, ...rest] = here.slice(4).split("_");
    const with_ = (i: number, v: string) => `cma:${[boot, ...rest].map((f, k) => (k === i ? v : f)).join("_")}`;
    expect(ctx.describeMismatch(here, with_(0, "another-boot"))).toMatch(/another machine/);
    expect(ctx.describeMismatch(here, with_(2, "f0000151"))).toMatch(/pid namespaces differ: run both in one \(docker run --pid=host/);
    expect(ctx.describeMismatch(here, with_(4, "f0000152"))).toMatch(/user namespaces differ/);
    expect(ctx.describeMismatch(here, with_(5, "1000"))).toMatch(/users differ \(uid_gid \d+_\d+ here, 1000_\d+ there\)/);
    expect(ctx.describeMismatch(here, `${here.split("_").slice(0, 7).join("_")}_0`)).toMatch(/permitted capabilities differ/);
    expect(ctx.describeMismatch(here, "cma:something else")).toBeUndefined();
  });

  it("refuses a number of copier threads that is not an integer from 1 to 64", () => {
    for (const parallelism of [0, -1, 1.5, 65, Number.NaN, "4"]) {
      expect(() => new CmaChannelContext({ parallelism: parallelism as number }), String(parallelism)).toThrow(
        expect.objectContaining({
          code: ErrorCode.INVALID_ARG,
          message: expect.stringMatching(/^CmaChannelOptions\.parallelism must be a whole number from 1 to 64, got /),
        }),
      );
    }
    expect(() => new CmaChannelContext({ parallelism: 64 })).not.toThrow();
  });

  it.each([
    ["inlineMax", "10", 'CmaChannelOptions.inlineMax must be a whole number from 0 to 9007199254740991, got the string "10"'],
    ["inlineMax", -1, "CmaChannelOptions.inlineMax must be a whole number from 0 to 9007199254740991, got number -1"],
    ["hugePages", "no", 'CmaChannelOptions.hugePages must be true or false, got the string "no"'],
  ])("refuses %s %s, saying what it takes", (name, value, message) => {
    expect(() => new CmaChannelContext({ [name]: value } as never)).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG, message }));
  });

  it("speaks upstream's wire with an end that writes no extension of this version", async () => {
    const ctx = (o = {}) => new CmaChannelContext(o);
    // One descriptor for all: ends set differently, and upstream's, still pair.
    expect(ctx({ inlineMax: 1024 }).deviceDescriptors()).toEqual(ctx().deviceDescriptors());
    expect([ctx().wireExtension(), ctx({ inlineMax: 1024 }).wireExtension()]).toEqual([`inline:auto;per-end;pool${NET}`, `inline:1024;per-end;pool${NET}`]);
    // None, an older tensorpipe-js's (which speaks its own wire only with an end
    // whose extension is its own), garbage, and a threshold past any length.
    for (const peerWireExtension of [
      undefined,
      `inline:auto;pool${NET}`,
      `inline:1024;pool${NET}`,
      "inline:1024",
      "something else",
      `inline:9999999999999999;per-end;pool${NET}`,
    ]) {
      const { here, there } = await connections();
      const sender = ctx({ inlineMax: 1024 }).createChannel(here, "connect", { transportMedium: "network", peerWireExtension });
      const sent = sender.send(patterned(100, 3), 100);
      // Upstream's announcement: {pid, address}, no length, and nothing inline.
      const frame = new NopReader(await there[0]!.read(64), "test");
      frame.structure(2, "test");
      expect(frame.uint(32)).toBe(process.pid);
      frame.uintBig();
      frame.end();
      await there[1]!.write([new Uint8Array(0)]);
      await sent;
      // An empty tensor is not on upstream's wire at all.
      await sender.send(new Uint8Array(0), 0);
    }
  });

  it("lends whatever threshold either lending end sets, each cutting at its own; ends that do not lend cut at the smaller", async () => {
    const ctx = (o = {}) => new CmaChannelContext(o);
    const lending = `inline:auto;per-end;pool${NET}`;
    for (const inlineMax of [0, 4096, 8 * MiB]) {
      const { here } = await connections();
      const channel = ctx({ inlineMax }).createChannel(here, "connect", { transportMedium: "shared-memory", peerWireExtension: lending }) as CmaChannel;
      const lent = channel.loan(MiB, undefined);
      expect(lent, `inlineMax ${inlineMax} here`).toBeDefined();
      expect((await lent)!.byteLength).toBe(MiB);
      channel.close();
    }
    // Neither lends: 2000 bytes go by address at the peer's 1024, not inline at this side's 4096.
    const { here, there } = await connections();
    const sender = ctx({ inlineMax: 4096 }).createChannel(here, "connect", {
      transportMedium: "network",
      peerWireExtension: `inline:1024;per-end${NET}`,
    }) as CmaChannel;
    expect(sender.loan(MiB, undefined)).toBeUndefined();
    const sent = sender.send(patterned(2000, 2), 2000);
    const frame = new NopReader(await there[0]!.read(64), "test");
    frame.structure(3, "test");
    expect(frame.uint(32)).toBe(process.pid);
    frame.uintBig();
    expect(frame.uint(64)).toBe(2000);
    frame.end();
    await there[1]!.write([new Uint8Array(0)]);
    await sent;
  });

  it("holds a lending peer to the inline size it announced: a larger tensor inline is a protocol error", async () => {
    const { here, there } = await connections();
    const receiver = new CmaChannelContext().createChannel(here, "accept", {
      transportMedium: "shared-memory",
      peerWireExtension: `inline:100000;per-end;pool${NET}`,
    }) as CmaChannel;
    // This side would take 4 MiB inline over shm; the peer said it cuts at 100,000.
    const got = receiver.recv(new Uint8Array(200_000), 200_000);
    await there[0]!.write([new Uint8Array(0), new Uint8Array(200_000)]);
    await expect(got).rejects.toMatchObject({ code: ErrorCode.PROTOCOL, message: "cma peer sent 200000 bytes inline, past 100000" });
    receiver.close();
  });

  it("sends every tensor inline to an end in another network namespace: no process there can be proven", async () => {
    const ctx = new CmaChannelContext();
    // The peer's extension as this side's, but for its network namespace.
    const peerWireExtension = ctx.wireExtension().replace(/;net:\d+$/, ";net:1");
    const { here, there } = await connections();
    const sender = ctx.createChannel(here, "connect", { transportMedium: "network", peerWireExtension }) as CmaChannel;
    const sent = sender.send(patterned(8 * MiB, 6), 8 * MiB);
    // The tensor itself on the wire, not where it lives.
    const frame = await there[0]!.read(16 * MiB);
    expect(frame.byteLength).toBe(8 * MiB);
    expect(hasPattern(frame, 6)).toBe(true);
    await sent;
    // Nothing lent: a loan is the pipe's plain memory.
    expect(sender.loan(MiB, undefined)).toBeUndefined();
  });

  it("by default sends through the transport up to 4 MiB over shm and 128 KiB over TCP", async () => {
    expect([defaultInlineMax("shared-memory"), defaultInlineMax("network"), defaultInlineMax(undefined)]).toEqual([4 * MiB, 128 * 1024, 128 * 1024]);
    for (const [transport, size, inline] of [
      ["shared-memory", 4 * MiB, true],
      ["shared-memory", 4 * MiB + 1, false],
      ["network", 128 * 1024, true],
      ["network", 128 * 1024 + 1, false],
    ] as const) {
      const { here, there } = await connections();
      const sender = between(new CmaChannelContext(), here, transport);
      const sent = sender.send(patterned(size, 3), size);
      // Inline, the first connection carries the tensor itself (past 64 KiB
      // after an empty header, as ends that lend say how each comes); else
      // where to read it from.
      const header = await there[0]!.read(8 * MiB);
      const frame = header.byteLength === 0 ? await there[0]!.read(8 * MiB) : header;
      expect(frame.byteLength === size, `${transport} ${size}`).toBe(inline);
      if (!inline) await there[1]!.write([new Uint8Array(0)]);
      await sent;
    }
  });

  it("copies a tensor straight into the receiver's memory and frees the sender after", async () => {
    const { here, there } = await connections();
    const sender = channel(here, { parallelism: 4 });
    const receiver = channel(there, { parallelism: 4 });
    const src = patterned(40 * MiB + 123, 5);
    const target = new Uint8Array(40 * MiB + 123);
    let sent = false;
    const sending = sender.send(src, src.length).then(() => (sent = true));
    await new Promise((r) => setTimeout(r, 10));
    expect(sent).toBe(false);
    await receiver.recv(target, target.length);
    await sending;
    expect(hasPattern(target, 5)).toBe(true);
  });

  // MADV_COLLAPSE gives up on pages pinned meanwhile, as they are while the
  // peer reads them: the buffer must still end up in huge pages.
  it.skipIf(!/\[(always|madvise)\]/.test(thp))("turns a buffer sent again and again into huge pages, though it is read meanwhile", async () => {
    const { here, there } = await connections();
    const sender = channel(here);
    const receiver = channel(there);
    const src = patterned(32 * MiB, 6);
    const targets = [0, 1, 2, 3].map(() => new Uint8Array(src.length));
    const address = loadAddon().addon!.addressOf(src, false);
    const aligned = (address + BigInt(HUGE_PAGE - 1)) & ~BigInt(HUGE_PAGE - 1);
    const interior = Math.floor((Number(address - aligned) + src.length) / HUGE_PAGE) * HUGE_PAGE;
    const transfer = (target: Uint8Array) => Promise.all([sender.send(src, src.length), receiver.recv(target, target.length)]);
    // The first collapse races four reads of the buffer.
    await Promise.all(targets.map(transfer));
    await expect
      .poll(
        async () => {
          await transfer(targets[0]!);
          return hugeKiB(aligned, interior);
        },
        { timeout: 20_000, interval: 200 },
      )
      .toBe(interior / 1024);
    expect(targets.every((t) => hasPattern(t, 6))).toBe(true);
  });

  it.skipIf(!/\[(always|madvise)\]/.test(thp))("leaves a buffer sent once as it is: a fresh buffer per request pays no collapse", async () => {
    const { here, there } = await connections();
    const sender = channel(here);
    const receiver = channel(there);
    // A size no other test sends: the ranges remembered are by address and length.
    const src = patterned(28 * MiB, 8);
    const address = loadAddon().addon!.addressOf(src, false);
    const aligned = (address + BigInt(HUGE_PAGE - 1)) & ~BigInt(HUGE_PAGE - 1);
    const interior = Math.floor((Number(address - aligned) + src.length) / HUGE_PAGE) * HUGE_PAGE;
    await Promise.all([sender.send(src, src.length), receiver.recv(new Uint8Array(src.length), src.length)]);
    await new Promise((r) => setTimeout(r, 500));
    expect(hugeKiB(aligned, interior)).toBe(0);
  });

  it("answers completions in order even when a later copy ends first", async () => {
    const { here, there } = await connections();
    const sender = channel(here);
    const receiver = channel(there);
    const big = patterned(64 * MiB, 1);
    const small = patterned(80 * 1024, 2);
    const sends = [sender.send(big, big.length), sender.send(small, small.length)];
    const targets = [new Uint8Array(big.length), new Uint8Array(small.length)];
    await Promise.all([receiver.recv(targets[0]!, big.length), receiver.recv(targets[1]!, small.length), ...sends]);
    expect(hasPattern(targets[0]!, 1) && hasPattern(targets[1]!, 2)).toBe(true);
  });

  it("fails the receive, and tells the sender, when the address is not readable", async () => {
    const { here, there } = await connections();
    const receiver = channel(there);
    await here[0]!.write([source(process.pid, 16n, MiB)]);
    await expect(receiver.recv(new Uint8Array(MiB), MiB)).rejects.toMatchObject({
      code: ErrorCode.CONNECTION_RESET,
      errnoName: "EFAULT",
      message: expect.stringMatching(/not readable/),
    });
    expect(Buffer.from(await here[1]!.read(4096)).toString()).toMatch(/not readable/);
  });

  it.each([
    ["a pid no process has", 2 ** 22 + 12345, /process 4206649 is not the peer: no process 4206649/],
    ["another process (init), readable to root", 1, /process 1 is not the peer/],
  ])("refuses %s with ERR_TP_PERMISSION_DENIED before any copy, and tells the sender", async (_, pid, message) => {
    const { here, there } = await connections();
    const receiver = channel(there);
    await here[0]!.write([source(pid, 4096n, MiB)]);
    await expect(receiver.recv(new Uint8Array(MiB), MiB)).rejects.toMatchObject({ code: ErrorCode.PERMISSION_DENIED, message: expect.stringMatching(message) });
    // The sender learns it was refused, and nothing of this machine's processes.
    const told = Buffer.from(await here[1]!.read(4096)).toString();
    expect(told).toMatch(/^ERR_TP_PERMISSION_DENIED: the process announced is not this pipe's peer/);
    expect(told).not.toMatch(/inode|\d{3,}/);
  });

  it("reads nothing once the proven peer has exited: its pid may be another process's by then", async () => {
    const { here, there } = await connections();
    const sender = channel(here);
    const receiver = channel(there);
    const data = patterned(MiB, 4);
    await Promise.all([sender.send(data, MiB), receiver.recv(new Uint8Array(MiB), MiB)]);
    // As the pinned pidfd reports once its process is gone.
    const addon = (receiver as unknown as { addon: { processExited(fd: number): boolean } }).addon;
    const exited = vi.spyOn(addon, "processExited").mockReturnValue(true);
    try {
      const target = new Uint8Array(MiB).fill(0xaa);
      await here[0]!.write([source(process.pid, 4096n, MiB)]);
      await expect(receiver.recv(target, MiB)).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED, message: expect.stringMatching(/has exited/) });
      expect(target.every((b) => b === 0xaa)).toBe(true);
    } finally {
      exited.mockRestore();
    }
  });

  it("reads only the pid it proved first: a later announcement of another is refused", async () => {
    const { here, there } = await connections();
    const sender = channel(here);
    const receiver = channel(there);
    const data = patterned(MiB, 3);
    await Promise.all([sender.send(data, MiB), receiver.recv(new Uint8Array(MiB), MiB)]);
    await here[0]!.write([source(1, 4096n, MiB)]);
    await expect(receiver.recv(new Uint8Array(MiB), MiB)).rejects.toMatchObject({
      code: ErrorCode.PERMISSION_DENIED,
      message: expect.stringMatching(/memory of pid 1, but the process at the other end is/),
    });
  });

  it("treats a length the receiver did not expect as a protocol error", async () => {
    const { here, there } = await connections();
    const receiver = channel(there);
    await here[0]!.write([source(process.pid, 4096n, 2 * MiB)]);
    await expect(receiver.recv(new Uint8Array(MiB), MiB)).rejects.toMatchObject({ code: ErrorCode.PROTOCOL });
  });

  it("sends tensors up to inlineMax through the connection itself", async () => {
    const { here, there } = await connections();
    const sender = between(new CmaChannelContext({ inlineMax: 1024 }), here);
    const receiver = between(new CmaChannelContext({ inlineMax: 1024 }), there);
    const src = patterned(1024, 9);
    await sender.send(src, 1024);
    // Inline: the bytes are on the first connection, as one frame.
    const target = new Uint8Array(1024);
    await receiver.recv(target, 1024);
    expect(hasPattern(target, 9)).toBe(true);
  });
});
