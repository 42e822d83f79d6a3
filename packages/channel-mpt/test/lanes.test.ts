import { type Connection, CPU_DEVICE, Context, ErrorCode, type Pipe } from "@tensorpipe/core/backend";
import { hasPattern, patterned, prng } from "@tensorpipe/core/testing";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { readdirSync } from "node:fs";
import { afterEach, describe, expect, it } from "vitest";
import { type BulkLanes, openBulkLanes } from "../src/bulk-lanes.js";
import { CHUNK_HEADER_BYTES, MAX_HEADER_PAD, decodeChunkHeader, encodeChunkHeader } from "../src/chunks.js";
import { type MptChannel, MptChannelContext, type MptChannelOptions } from "../src/index.js";

const MiB = 1024 * 1024;
const transport = new UvTransport();
const cleanup: (() => void)[] = [];
afterEach(() => {
  for (const f of cleanup.splice(0)) f();
});

/** `n` connected uv connection pairs. */
async function connections(n: number): Promise<{ here: Connection[]; there: Connection[] }> {
  const accepted: Connection[] = [];
  const listener = await transport.listen("127.0.0.1:0", (c) => accepted.push(c));
  const here: Connection[] = [];
  for (let i = 0; i < n; i++) {
    here.push(await transport.connect(listener.address()));
    await expect.poll(() => accepted.length).toBe(i + 1);
  }
  listener.close();
  cleanup.push(() => [...here, ...accepted].forEach((c) => c.close()));
  return { here, there: accepted };
}

async function lanes(conns: Connection[], threads: boolean, unsentLimit?: number): Promise<BulkLanes> {
  const l = await openBulkLanes(conns, 1 * MiB, threads, unsentLimit);
  cleanup.push(() => l.close());
  return l;
}

describe.each([
  { kind: "threads", threads: true, unsentLimit: 0 },
  { kind: "threads", threads: true, unsentLimit: 64 * 1024 },
  { kind: "event loop", threads: false, unsentLimit: 0 },
])("mpt bulk lanes ($kind, unsent limit $unsentLimit)", ({ kind, threads, unsentLimit }) => {
  it(`run as asked (${kind})`, async () => {
    const { here } = await connections(2);
    expect((await lanes(here, threads, unsentLimit)).kind).toBe(kind);
  });

  it("land every chunk in place when several tensors are in flight both ways", async () => {
    const { here, there } = await connections(3);
    const [a, b] = [await lanes(here, threads, unsentLimit), await lanes(there, !threads, unsentLimit)];
    const rand = prng(3);
    const sizes = Array.from({ length: 12 }, () => Math.floor(rand() * 9 * MiB) + 1);
    const targets = sizes.map((n) => new Uint8Array(n));
    const back = sizes.map((n) => new Uint8Array(n));
    await Promise.all([
      ...sizes.map((n, i) => a.send(patterned(n, i))),
      ...sizes.map((n, i) => b.send(patterned(n, 100 + i))),
      ...targets.map((t) => b.recv(t)),
      ...back.map((t) => a.recv(t)),
    ]);
    targets.forEach((t, i) => expect(hasPattern(t, i)).toBe(true));
    back.forEach((t, i) => expect(hasPattern(t, 100 + i)).toBe(true));
  });

  it("hold chunks that come before their receive is posted", async () => {
    const { here, there } = await connections(2);
    const [a, b] = [await lanes(here, !threads), await lanes(there, threads)];
    const sent = [3, 5, 7].map((seed) => a.send(patterned(6 * MiB, seed)));
    await new Promise((r) => setTimeout(r, 100));
    for (const seed of [3, 5, 7]) {
      const t = new Uint8Array(6 * MiB);
      await b.recv(t);
      expect(hasPattern(t, seed)).toBe(true);
      await new Promise((r) => setTimeout(r, 20));
    }
    await Promise.all(sent);
  });

  it("carry zero-length tensors without sending anything", async () => {
    const { here, there } = await connections(2);
    const [a, b] = [await lanes(here, threads), await lanes(there, threads)];
    await Promise.all([a.send(new Uint8Array(0)), b.recv(new Uint8Array(0))]);
    const t = new Uint8Array(MiB);
    await Promise.all([a.send(patterned(MiB, 1)), b.recv(t)]);
    expect(hasPattern(t, 1)).toBe(true);
  });

  it("deliver what the transport had read before the lanes took over", async () => {
    const { here, there } = await connections(1);
    const data = patterned(1000, 4);
    await here[0]!.write([encodeChunkHeader({ seq: 0, offset: 0, length: 1000 }), data]);
    await new Promise((r) => setTimeout(r, 50));
    const b = await lanes(there, threads);
    const t = new Uint8Array(1000);
    await b.recv(t);
    expect(hasPattern(t, 4)).toBe(true);
  });

  it.each([
    ["a tensor far beyond any receive posted", { seq: 1 << 21, offset: 0, length: 10 }],
    ["a chunk past the tensor's end", { seq: 0, offset: 60, length: 10 }],
    ["an empty chunk", { seq: 0, offset: 0, length: 0 }],
  ])("fail with ERR_TP_PROTOCOL on %s", async (_, header) => {
    const { here, there } = await connections(1);
    const b = await lanes(there, threads);
    const pending = b.recv(new Uint8Array(64));
    await here[0]!.write([encodeChunkHeader(header), new Uint8Array(header.length)]);
    await expect(pending).rejects.toMatchObject({ code: ErrorCode.PROTOCOL });
    await expect(b.recv(new Uint8Array(1))).rejects.toMatchObject({ code: ErrorCode.PROTOCOL });
  });

  // A peer's chunks of one tensor must not overlap: bytes counted twice
  // left part of a tensor unwritten and delivered, and a lane still
  // writing into memory already delivered (another message's, once the
  // user let go of it).
  it.each([
    [
      "the same chunk twice",
      [
        { lane: 0, offset: 0, length: 2 * MiB },
        { lane: 1, offset: 0, length: 2 * MiB },
      ],
    ],
    [
      "a chunk over another",
      [
        { lane: 0, offset: 0, length: MiB },
        { lane: 1, offset: 0, length: 2 * MiB },
      ],
    ],
    [
      "a chunk inside another",
      [
        { lane: 0, offset: 0, length: 2 * MiB },
        { lane: 1, offset: MiB / 2, length: MiB },
      ],
    ],
    ["a chunk shorter than a sender cuts, not the tensor's last", [{ lane: 0, offset: 0, length: 1000 }]],
  ])("fail with ERR_TP_PROTOCOL on %s, and deliver nothing", async (_, chunks) => {
    const { here, there } = await connections(2);
    const b = await lanes(there, threads);
    const target = new Uint8Array(4 * MiB);
    const pending = b.recv(target);
    let delivered = false;
    pending.then(
      () => (delivered = true),
      () => undefined,
    );
    for (const { lane, offset, length } of chunks) {
      // The last write meets lanes this side closed on its refusal.
      here[lane]!.write([encodeChunkHeader({ seq: 0, offset, length }), new Uint8Array(length).fill(0xee)]).catch(() => undefined);
      await new Promise((r) => setTimeout(r, 50));
    }
    await expect(pending).rejects.toMatchObject({ code: ErrorCode.PROTOCOL, message: expect.stringContaining("overlaps another chunk") });
    expect(delivered).toBe(false);
  });

  it("fail with ERR_TP_PROTOCOL on a header that is not a chunk header", async () => {
    const { here, there } = await connections(1);
    const b = await lanes(there, threads);
    const pending = b.recv(new Uint8Array(64));
    await here[0]!.write([new Uint8Array(CHUNK_HEADER_BYTES + MAX_HEADER_PAD + 1)]);
    await expect(pending).rejects.toMatchObject({ code: ErrorCode.PROTOCOL });
  });

  it("reject what is pending when the peer goes away mid-tensor, and everything after", async () => {
    const { here, there } = await connections(2);
    const b = await lanes(there, threads);
    const pending = [b.recv(new Uint8Array(8 * MiB)), b.recv(new Uint8Array(8))];
    await here[0]!.write([encodeChunkHeader({ seq: 0, offset: 0, length: 4 * MiB }), new Uint8Array(4 * MiB)]);
    for (const c of here) c.close();
    for (const p of pending) await expect(p).rejects.toMatchObject({ code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/) });
    await expect(b.send(new Uint8Array(8))).rejects.toMatchObject({ code: expect.stringMatching(/^ERR_TP_/) });
  });

  it("deliver what a peer sent before it closed, though its other lanes ended first", async () => {
    const { here, there } = await connections(3);
    const b = await lanes(there, threads);
    // One tensor on the last lane; the peer then closes every lane, and the
    // idle ones' ends reach this side before the receive is posted.
    await here[2]!.write([encodeChunkHeader({ seq: 0, offset: 0, length: 1000 }), patterned(1000, 9)]);
    for (const c of here) c.close();
    await new Promise((r) => setTimeout(r, 100));
    const target = new Uint8Array(1000);
    await b.recv(target);
    expect(hasPattern(target, 9)).toBe(true);
    await expect(b.recv(new Uint8Array(8))).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
  });

  it("reject what is pending with ERR_TP_CLOSED when closed here", async () => {
    const { here, there } = await connections(2);
    const [a, b] = [await lanes(here, threads), await lanes(there, threads)];
    const pending = [b.recv(new Uint8Array(MiB)), b.send(patterned(64 * MiB, 1))];
    b.close();
    for (const p of pending) await expect(p).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    await expect(b.recv(new Uint8Array(1))).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    await expect(a.recv(new Uint8Array(64 * MiB))).rejects.toMatchObject({
      code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET|PROTOCOL)/),
    });
  });
});

describe("mpt bulk lanes on threads, when a lane is gone before they start", () => {
  it("close the sockets of the lanes that came: none stays open, unread", async () => {
    const fds = () => readdirSync("/proc/self/fd").length;
    const { there } = await connections(3);
    const before = fds();
    // A peer gone mid-handshake: one lane failed before it could be handed over.
    there[1]!.close();
    await expect(openBulkLanes(there, 1 * MiB, true)).rejects.toMatchObject({ code: expect.stringMatching(/^ERR_TP_/) });
    // The other two lanes' sockets went with it: three fewer than before.
    await expect.poll(fds).toBe(before - 3);
  });
});

describe("mpt bulk lanes on threads", () => {
  it("start each chunk on the wire at its offset modulo 64 in the sender's memory", async () => {
    const { here, there } = await connections(1);
    const a = await lanes(here, true);
    const memory = new Uint8Array(4 * MiB);
    const starts = [0, 1, 5, 17, 33, 63, 64, 100];
    const sent = starts.map((k, i) => a.send(memory.subarray(k, k + 300_000 + i * 7777)));
    // The buffer's address is unknown here, but every chunk must keep the
    // same distance from it modulo 64, however its tensor starts.
    const phases = new Set<number>();
    let position = 0;
    let chunks = 0;
    for (let moved = 0; moved < starts.reduce((n, _, i) => n + 300_000 + i * 7777, 0); chunks++) {
      const frame = await there[0]!.read(CHUNK_HEADER_BYTES + MAX_HEADER_PAD);
      const { seq, offset, length } = decodeChunkHeader(frame);
      position += 8 + frame.byteLength + 8;
      phases.add((position - starts[seq]! - offset) & 63);
      expect((await there[0]!.read(MiB)).byteLength).toBe(length);
      position += length;
      moved += length;
    }
    await Promise.all(sent);
    expect(chunks).toBeGreaterThan(starts.length);
    expect([...phases]).toHaveLength(1);
  });
});

describe("mpt channel in pipes", () => {
  const contexts: Context[] = [];
  afterEach(async () => {
    await Promise.all(contexts.splice(0).map((c) => c.close()));
  });

  /** A pipe pair whose mpt channels are kept for inspection. */
  async function pipes(
    transportName: "uv" | "shm",
    server: MptChannelOptions,
    client: MptChannelOptions,
  ): Promise<{ a: Pipe; b: Pipe; channels: MptChannel[] }> {
    const channels: MptChannel[] = [];
    const make = (options: MptChannelOptions) => {
      const ctx = new Context();
      ctx.registerTransport(0, transportName, transportName === "uv" ? new UvTransport() : new ShmTransport());
      const mpt = new MptChannelContext(options);
      const create = mpt.createChannel.bind(mpt);
      mpt.createChannel = (conns) => {
        const c = create(conns) as MptChannel;
        channels.push(c);
        return c;
      };
      ctx.registerChannel(0, "mpt", mpt);
      contexts.push(ctx);
      return ctx;
    };
    const listener = await make(server).listen(transportName === "uv" ? "uv://127.0.0.1:0" : "shm://");
    const [b, a] = await Promise.all([make(client).connect(listener.addresses()[0]!), listener.accept()]);
    return { a, b, channels };
  }

  it("runs the bulk lanes on threads over uv, in the event loop over shm or when told", async () => {
    const uv = await pipes("uv", { lanes: 3 }, { lanes: 3, threads: false });
    expect(await Promise.all(uv.channels.map((c) => c.lanesKind()))).toEqual(["event loop", "threads"]);
    const shm = await pipes("shm", { lanes: 2 }, { lanes: 2 });
    expect(await Promise.all(shm.channels.map((c) => c.lanesKind()))).toEqual(["event loop", "event loop"]);
    for (const { a, b } of [uv, shm]) {
      const w = b.write({ tensors: [{ buffer: patterned(5 * MiB, 2), targetDevice: CPU_DEVICE }, { buffer: patterned(10, 3) }] });
      const m = await a.readMessage();
      expect(hasPattern(m.tensors[0]!.buffer as Uint8Array, 2) && hasPattern(m.tensors[1]!.buffer as Uint8Array, 3)).toBe(true);
      await w;
    }
  });

  it("takes the listener's lane count", async () => {
    const { a, b, channels } = await pipes("uv", { lanes: 2 }, { lanes: 6 });
    expect(channels).toHaveLength(2);
    const w = b.write({ tensors: [{ buffer: patterned(16 * MiB, 5), targetDevice: CPU_DEVICE }] });
    const m = await a.readMessage();
    expect(hasPattern(m.tensors[0]!.buffer as Uint8Array, 5)).toBe(true);
    await w;
  });

  it("does not pair with an end of version 1, whose lanes read only unpadded chunk headers", () => {
    const mpt = new MptChannelContext();
    const [here] = mpt.deviceDescriptors();
    expect(mpt.canCommunicateWithRemote(here!.descriptor, "split=1048576")).toBe(false);
    expect(mpt.canCommunicateWithRemote(here!.descriptor, new MptChannelContext().deviceDescriptors()[0]!.descriptor)).toBe(true);
  });

  it("is not negotiated between ends that split tensors at different sizes: connect says so", async () => {
    await expect(pipes("uv", { minSplit: 1 * MiB }, { minSplit: 2 * MiB })).rejects.toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringMatching(/no channel for CPU tensors in common with the listener: this side offers mpt/),
    });
  });
});
