import { CPU_DEVICE, ErrorCode } from "@tensorpipe/core";
import { hasPattern, patterned, prng } from "@tensorpipe/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BackendChoice, createContext, type PeerProcess, spawnPeer } from "@tensorpipe/bench";

const paths: { name: string; choice: BackendChoice; transport: string; channel: string }[] = [
  { name: "the best both have", choice: {}, transport: "shm", channel: "cma" },
  { name: "uv + basic", choice: { transports: ["uv"], channels: ["basic"] }, transport: "uv", channel: "basic" },
];

describe.each(paths)("two processes over $name", async ({ choice, transport, channel }) => {
  let peer: PeerProcess;
  const context = await createContext(choice);

  beforeAll(async () => {
    peer = await spawnPeer();
  });

  afterAll(async () => {
    await context.close();
    await peer?.stop();
  });

  it(`negotiates ${transport} and ${channel} with the child`, async () => {
    const pipe = await context.connect(peer.url);
    expect(pipe.transport).toBe(transport);
    expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe(channel);
    pipe.close();
  });

  it("round-trips 1000 messages of random payload and tensor sizes, contents checked", async () => {
    const pipe = await context.connect(peer.url);
    const rand = prng(2024);
    const n = 1000;
    const shapes = Array.from({ length: n }, () => ({
      payloads: Array.from({ length: Math.floor(rand() * 3) }, () => Math.floor(rand() ** 3 * 100_000)),
      tensors: Array.from({ length: Math.floor(rand() * 4) }, () => ({
        size: Math.floor(rand() ** 4 * 2_000_000),
        targeted: rand() < 0.5,
      })),
    }));
    const writes = shapes.map((s, i) =>
      pipe.write({
        metadata: `message ${i}`,
        payloads: s.payloads.map((len, j) => ({ data: patterned(len, i * 10 + j), metadata: `p${j}` })),
        tensors: s.tensors.map((t, j) => ({
          buffer: patterned(t.size, i * 10 + 5 + j),
          metadata: `t${j}`,
          ...(t.targeted ? { targetDevice: CPU_DEVICE } : {}),
        })),
      }),
    );
    for (let i = 0; i < n; i++) {
      const m = await pipe.readMessage();
      const s = shapes[i]!;
      expect(m.metadata).toBe(`message ${i}`);
      expect(m.payloads.map((p) => p.data.length)).toEqual(s.payloads);
      expect(m.tensors.map((t) => t.length)).toEqual(s.tensors.map((t) => t.size));
      m.payloads.forEach((p, j) => {
        expect(p.metadata).toBe(`p${j}`);
        expect(hasPattern(p.data, i * 10 + j)).toBe(true);
      });
      m.tensors.forEach((t, j) => {
        expect(t.metadata).toBe(`t${j}`);
        expect(hasPattern(t.buffer as Uint8Array, i * 10 + 5 + j)).toBe(true);
      });
    }
    await Promise.all(writes);
    pipe.close();
  });

  it("rejects pending reads and writes within a second when the child is SIGKILLed mid-transfer", async () => {
    const victim = await spawnPeer();
    const pipe = await context.connect(victim.url);
    const big = patterned(64 * 1024 * 1024, 1);
    // Echoed back: the child is busy with it (or with its reply) when it dies.
    const writing = pipe.write({ tensors: [{ buffer: big, targetDevice: CPU_DEVICE }] });
    const reading = pipe.readMessage();
    await new Promise((r) => setTimeout(r, 20));
    const started = performance.now();
    victim.child.kill("SIGKILL");
    const settled = await Promise.allSettled([writing, reading]);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(settled[1].status).toBe("rejected");
    for (const s of settled) {
      if (s.status === "rejected") {
        expect(s.reason.code).toMatch(/^ERR_TP_(PEER_CLOSED|CONNECTION_RESET|PROTOCOL)$/);
        expect(s.reason.message).toMatch(/pipe to|connection to|pid/);
      }
    }
    expect((await pipe.closed).code).toMatch(/^ERR_TP_/);
    await victim.stop();
    // The process is fine and new pipes work.
    const fresh = await context.connect(peer.url);
    await fresh.write({ metadata: "after" });
    expect((await fresh.readMessage()).metadata).toBe("after");
    fresh.close();
  });

  it("fails to connect with ERR_TP_CONNECTION_REFUSED once the child is gone", async () => {
    const gone = await spawnPeer();
    await gone.stop();
    await expect(context.connect(gone.url)).rejects.toMatchObject({ code: ErrorCode.CONNECTION_REFUSED });
  });
});

describe("negotiation between two processes with different backends", () => {
  const cases: { name: string; peer: string[]; client: BackendChoice; transport: string; channel: string }[] = [
    { name: "listener without shm/cma", peer: ["--transports", "uv", "--channels", "basic"], client: {}, transport: "uv", channel: "basic" },
    { name: "client without shm", peer: [], client: { transports: ["uv"] }, transport: "uv", channel: "cma" },
    { name: "client without cma", peer: [], client: { channels: ["basic"] }, transport: "shm", channel: "basic" },
    { name: "both with everything", peer: [], client: {}, transport: "shm", channel: "cma" },
  ];
  it.each(cases)("$name: $transport + $channel", async ({ peer: peerArgs, client, transport, channel }) => {
    const peer = await spawnPeer("127.0.0.1", peerArgs);
    const context = await createContext(client);
    try {
      const pipe = await context.connect(peer.url);
      expect(pipe.transport).toBe(transport);
      expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe(channel);
      const tensor = patterned(1 << 20, 3);
      const w = pipe.write({ tensors: [{ buffer: tensor, targetDevice: CPU_DEVICE }] });
      const m = await pipe.readMessage();
      expect(hasPattern(m.tensors[0]!.buffer as Uint8Array, 3)).toBe(true);
      await w;
    } finally {
      await context.close();
      await peer.stop();
    }
  });
});
