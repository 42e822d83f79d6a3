/**
 * A live upstream C++ TensorPipe (Debian's libtensorpipe-dev, built into
 * @tensorpipe/bench's upstream_peer) against our Context, both ways: it listens and we
 * connect, and it connects to our listener. It echoes every message; every
 * byte that comes back is checked. Without the library the tests say so and
 * skip, and fail where TP_REQUIRE_CPP_PEER=1 (CI).
 */
import { CPU_DEVICE, type Context, ErrorCode, type Message, type Pipe, type TensorPipeError } from "@tensorpipe/core";
import { hasPattern, patterned, prng } from "@tensorpipe/core/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type JsonChild, createContext, upstreamClient, upstreamListener, upstreamPeerMissing, upstreamRoundTrips } from "@tensorpipe/bench";

const missing = upstreamPeerMissing();
const required = process.env.TP_REQUIRE_CPP_PEER === "1";
if (missing) console.warn(`${missing}: ${required ? "failing" : "skipping"} the C++ peer tests`);

const MiB = 1024 * 1024;

type Peer = JsonChild<{ urls?: string[] }>;

/** A message of the given sizes, every part patterned from `seed`, and what its echo must hold. */
function shaped(seed: number, payloads: number[], tensors: { size: number; targeted: boolean }[], metadata = `m${seed}`): Message {
  return {
    metadata,
    payloads: payloads.map((n, i) => ({ data: patterned(n, seed * 1000 + i), metadata: `p${i}` })),
    tensors: tensors.map((t, i) => ({
      buffer: patterned(t.size, seed * 1000 + 500 + i),
      metadata: `t${i}`,
      ...(t.targeted ? {} : { targetDevice: null }),
    })),
  };
}

/** Reads the echo of `sent` (made by shaped(seed, ...)) and checks every byte. */
async function expectEcho(pipe: Pipe, sent: Message, seed: number): Promise<void> {
  const got = await pipe.readMessage();
  expect(got.metadata).toBe(sent.metadata);
  expect(got.payloads.map((p) => [p.data.byteLength, p.metadata])).toEqual((sent.payloads ?? []).map((p) => [p.data.byteLength, p.metadata]));
  expect(got.tensors.map((t) => [t.length, t.metadata])).toEqual((sent.tensors ?? []).map((t) => [t.buffer.byteLength, t.metadata]));
  got.payloads.forEach((p, i) => expect(hasPattern(p.data, seed * 1000 + i), `payload ${i}`).toBe(true));
  got.tensors.forEach((t, i) => expect(hasPattern(t.buffer as Uint8Array, seed * 1000 + 500 + i), `tensor ${i}`).toBe(true));
}

const SHAPES: [string, number, number[], { size: number; targeted: boolean }[], string?][] = [
  ["an empty message", 1, [], [], ""],
  ["metadata alone", 2, [], [], "x".repeat(10_000)],
  [
    "zero-length payloads and tensors",
    3,
    [0, 0],
    [
      { size: 0, targeted: true },
      { size: 0, targeted: false },
    ],
  ],
  [
    "tensors without target devices",
    4,
    [],
    [
      { size: 100, targeted: false },
      { size: 70_000, targeted: false },
    ],
  ],
  [
    "many payloads and tensors",
    5,
    Array.from({ length: 16 }, (_, i) => i * 33),
    Array.from({ length: 64 }, (_, i) => ({ size: i * 517, targeted: i % 3 !== 0 })),
  ],
];

/** The exchanges every direction runs, over `pipe` to an echoing tp_peer. */
function exchanges(pipe: () => Pipe) {
  it.each(SHAPES)("echoes %s, every byte checked", async (_, seed, payloads, tensors, metadata) => {
    const m = shaped(seed, payloads, tensors, metadata);
    await pipe().write(m);
    await expectEcho(pipe(), m, seed);
  });

  it("echoes 1000 pipelined random messages, every byte checked", async () => {
    const rand = prng(38);
    const sent = Array.from({ length: 1000 }, (_, k) =>
      shaped(
        100 + k,
        Array.from({ length: Math.floor(rand() * 3) }, () => Math.floor(rand() ** 3 * 50_000)),
        Array.from({ length: Math.floor(rand() * 4) }, () => ({ size: Math.floor(rand() ** 4 * 500_000), targeted: rand() < 0.5 })),
      ),
    );
    const writes = Promise.all(sent.map((m) => pipe().write(m)));
    for (let k = 0; k < sent.length; k++) await expectEcho(pipe(), sent[k]!, 100 + k);
    await writes;
  });

  it("echoes 256 MiB", async () => {
    const m = shaped(9, [], [{ size: 256 * MiB, targeted: true }]);
    await pipe().write(m);
    await expectEcho(pipe(), m, 9);
  });
}

describe.skipIf(missing !== undefined && !required)("a live C++ TensorPipe peer", () => {
  let context: Context;
  const peers: Peer[] = [];
  beforeAll(async () => {
    context = await createContext();
  });
  afterAll(async () => {
    await context?.close();
  });
  afterEach(async () => {
    for (const p of peers.splice(0)) await p.stop();
  });

  describe.each([
    ["uv + basic", "uv", "basic", "basic"],
    ["uv + cma", "uv", "cma", "cma"],
    ["uv, shm + basic, cma, mpt (shm and mpt do not interoperate)", "uv,shm", "basic,cma,mpt", "cma"],
  ])("listening, with %s: our client", (_, transports, channels, expected) => {
    let peer: Peer;
    let pipe: Pipe;
    beforeAll(async () => {
      peer = await upstreamListener(transports, channels);
      pipe = await context.connect(peer.info.urls![0]!);
    });
    afterAll(async () => {
      pipe?.close();
      await peer?.stop();
    });

    it(`negotiates uv and ${expected}`, () => {
      expect(pipe.transport).toBe("uv");
      expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe(expected);
    });

    it("reports its path, with the listener's part inferred and marked so", () => {
      const path = pipe.path;
      expect(path).toMatchObject({ side: "connect", transport: "uv", peerReported: false, offeredThere: undefined });
      expect(path.verdicts).toContainEqual({
        kind: "channel",
        name: expected,
        pair: "cpu:0->cpu:0",
        by: "there",
        outcome: "chosen",
        reason: "chosen by the listener",
      });
      const others = path.verdicts.filter((v) => v.kind === "channel" && v.name !== expected && v.by !== "here");
      expect(others.length).toBeGreaterThan(0);
      for (const v of others)
        expect(v).toMatchObject({
          by: "inferred",
          outcome: "not chosen",
          reason: expect.stringMatching(/it did not say which: an upstream listener never does/),
        });
    });
    exchanges(() => pipe);
  });

  describe.each([
    ["uv + basic", "basic"],
    ["uv + basic, cma", "basic,cma"],
  ])("connecting to our listener with %s", (_, channels) => {
    let peer: Peer;
    let pipe: Pipe;
    beforeAll(async () => {
      const listener = await context.listen("uv://127.0.0.1:0");
      peer = await upstreamClient("uv", channels, listener.addresses()[0]!);
      pipe = await listener.accept({ timeout: 10_000 });
      listener.close();
    });
    afterAll(async () => {
      pipe?.close();
      await peer?.stop();
    });

    it(`negotiates ${channels.endsWith("cma") ? "cma" : "basic"}`, () => {
      expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe(channels.endsWith("cma") ? "cma" : "basic");
    });

    it("reports its path: what the upstream peer offered, and this side's reasons", () => {
      expect(pipe.path).toMatchObject({
        side: "listen",
        transport: "uv",
        peerReported: false,
        offeredThere: { transports: ["uv"], channels: expect.arrayContaining(channels.split(",")) },
      });
      expect(pipe.path.verdicts).toContainEqual(expect.objectContaining({ kind: "channel", name: "mpt", by: "there", outcome: "not offered" }));
    });
    exchanges(() => pipe);
  });

  it("over uv + cma, a client that closes right after its last read fails none of our listener's writes on its main connection's end, in 40 runs", async () => {
    const listener = await context.listen("uv://127.0.0.1:0");
    const failures: { main: string; where: string | undefined }[] = [];
    const echoing = (async () => {
      for await (const pipe of listener) {
        void (async () => {
          try {
            for await (const m of pipe)
              await pipe.write({ metadata: m.metadata, tensors: m.tensors.map((t) => ({ buffer: t.buffer, targetDevice: CPU_DEVICE })) });
          } catch (e) {
            failures.push({ main: `uv connection to ${pipe.peer}`, where: ((e as Error).cause as TensorPipeError | undefined)?.where });
          }
        })();
      }
    })();
    try {
      // Upstream's benchmark: its last read done, it writes cma's completion
      // and closes at once. Before, a quarter of such runs failed our last
      // write on main's end, the completion unread on cma's connection.
      for (let i = 0; i < 40; i++) await upstreamRoundTrips("uv", "cma", listener.url(), 8, 1);
      await new Promise((r) => setTimeout(r, 200));
      // Upstream calls its read callback before it writes the completion
      // (channel/cma/channel_impl.cc), so a client that closes from another
      // thread at once sometimes never sends it: a packet capture of such a
      // run shows the FIN with no completion before it. Those writes fail on
      // the end of cma's own connection, and only those.
      console.log(`${failures.length} of 40 runs: the client closed before it sent its completion`);
      expect(failures.filter((f) => f.where === undefined || f.where === f.main)).toEqual([]);
      // How many is the client's timing, not this side's: 0-9 of 40 alone
      // here, 32 in a fresh clone's CI with the machine busy. Not all.
      expect(failures.length).toBeLessThan(40);
    } finally {
      listener.close();
      await echoing;
    }
  });

  it("fails every pending operation when the peer is killed mid-transfer", async () => {
    const peer = await upstreamListener("uv", "basic");
    peers.push(peer);
    const pipe = await context.connect(peer.info.urls![0]!);
    const big = shaped(7, [], [{ size: 256 * MiB, targeted: true }]);
    const write = pipe.write(big);
    const read = pipe.readMessage();
    // Some of it on its way, then the peer is gone.
    await new Promise((r) => setTimeout(r, 50));
    peer.child.kill("SIGKILL");
    const codes = [ErrorCode.PEER_CLOSED, ErrorCode.CONNECTION_RESET];
    const [w, r] = await Promise.allSettled([write, read]);
    expect(r).toMatchObject({ status: "rejected", reason: { code: expect.toSatisfy((c: string) => codes.includes(c as never)) } });
    if (w.status === "rejected") expect(codes).toContain((w.reason as { code: string }).code);
    expect(codes).toContain((await pipe.closed).code);
  });
});
