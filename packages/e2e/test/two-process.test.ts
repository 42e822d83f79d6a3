import { CPU_DEVICE, ErrorCode } from "@tensorpipe/core";
import { hasPattern, patterned, prng } from "@tensorpipe/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createContext } from "../src/backends.js";
import { type PeerProcess, spawnPeer } from "../src/spawn-peer.js";

describe("two processes over uv + basic", () => {
  let peer: PeerProcess;
  const context = createContext();

  beforeAll(async () => {
    peer = await spawnPeer();
  });

  afterAll(async () => {
    await context.close();
    await peer?.stop();
  });

  it("negotiates uv and basic with the child", async () => {
    const pipe = await context.connect(peer.url);
    expect(pipe.transport).toBe("uv");
    expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("basic");
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

  it("rejects pending reads within a second when the child is SIGKILLed", async () => {
    const victim = await spawnPeer();
    const pipe = await context.connect(victim.url);
    const pending = pipe.readDescriptor();
    const started = performance.now();
    victim.child.kill("SIGKILL");
    await expect(pending).rejects.toMatchObject({ code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/) });
    expect(performance.now() - started).toBeLessThan(1000);
    await expect(pipe.write({ payloads: [{ data: new Uint8Array(10) }] })).rejects.toBeTruthy();
    await victim.stop();
  });

  it("fails to connect with ERR_TP_CONNECTION_REFUSED once the child is gone", async () => {
    const gone = await spawnPeer();
    await gone.stop();
    await expect(context.connect(gone.url)).rejects.toMatchObject({ code: ErrorCode.CONNECTION_REFUSED });
  });
});
