/** 64 pipes to one listener, 100 writes in flight on each: all arrive, intact and in order. */
import { CPU_DEVICE } from "@tensorpipe/core";
import { hasPattern, patterned } from "@tensorpipe/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { createContext, type PeerProcess, spawnPeer } from "@tensorpipe/bench";

describe.each([
  ["uv", "basic"],
  ["shm", "cma"],
])("load over %s + %s", async (transport, channel) => {
  const choice = { transports: [transport], channels: [channel] };
  const context = await createContext(choice);
  let peer: PeerProcess | undefined;
  afterAll(async () => {
    await context.close();
    await peer?.stop();
  });

  it("64 concurrent pipes x 100 in-flight writes each", async () => {
    peer = await spawnPeer("127.0.0.1", ["--transports", transport, "--channels", channel]);
    const pipes = await Promise.all(Array.from({ length: 64 }, () => context.connect(peer!.url)));
    expect(pipes.every((p) => p.transport === transport)).toBe(true);
    await Promise.all(
      pipes.map(async (pipe, p) => {
        const writes = Array.from({ length: 100 }, (_, i) =>
          pipe.write({
            metadata: `${p}/${i}`,
            tensors: [{ buffer: patterned(256 + ((p * 100 + i) % 2000), p * 1000 + i), targetDevice: CPU_DEVICE }],
          }),
        );
        for (let i = 0; i < 100; i++) {
          const m = await pipe.readMessage();
          expect(m.metadata).toBe(`${p}/${i}`);
          expect(hasPattern(m.tensors[0]!.buffer as Uint8Array, p * 1000 + i)).toBe(true);
        }
        await Promise.all(writes);
        pipe.close();
      }),
    );
  });
});
