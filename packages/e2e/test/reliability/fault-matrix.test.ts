/**
 * Every viable transport x channel pair: the peer is SIGKILLed before,
 * during and after a large transfer. Pending operations reject within a
 * second with a typed error that names the peer; the process stays healthy
 * and new pipes work.
 */
import { CPU_DEVICE, ErrorCode, type Pipe } from "@tensorpipe/core";
import { hasPattern, patterned } from "@tensorpipe/core/testing";
import { afterAll, describe, expect, it } from "vitest";
import { createContext, type PeerProcess, spawnPeer } from "@tensorpipe/bench";

const pairs = [
  ["uv", "basic"],
  ["uv", "cma"],
  ["shm", "basic"],
  ["shm", "cma"],
] as const;

const FAILED = /^ERR_TP_(PEER_CLOSED|CONNECTION_RESET|PROTOCOL)$/;
const big = patterned(64 * 1024 * 1024, 7);

describe.each(pairs)("peer killed, over %s + %s", async (transport, channel) => {
  const choice = { transports: [transport], channels: [channel] };
  const args = ["--transports", transport, "--channels", channel];
  const context = await createContext(choice);
  afterAll(() => context.close());

  async function pipeTo(): Promise<{ peer: PeerProcess; pipe: Pipe }> {
    const peer = await spawnPeer("127.0.0.1", args);
    const pipe = await context.connect(peer.url);
    expect(pipe.transport).toBe(transport);
    expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe(channel);
    return { peer, pipe };
  }

  async function expectAllRejected(ops: Promise<unknown>[], started: number) {
    const settled = await Promise.allSettled(ops);
    expect(performance.now() - started).toBeLessThan(1000);
    for (const s of settled) {
      expect(s.status).toBe("rejected");
      const e = (s as PromiseRejectedResult).reason;
      expect(e.code).toMatch(FAILED);
      expect(e.message).toMatch(/pipe to|connection to|pid/);
    }
  }

  async function stillHealthy() {
    const { peer, pipe } = await pipeTo();
    const w = pipe.write({ tensors: [{ buffer: patterned(1000, 3), targetDevice: CPU_DEVICE }] });
    const m = await pipe.readMessage();
    expect(hasPattern(m.tensors[0]!.buffer as Uint8Array, 3)).toBe(true);
    await w;
    pipe.close();
    await peer.stop();
  }

  it("before the transfer: connecting fails with ERR_TP_CONNECTION_REFUSED", async () => {
    const peer = await spawnPeer("127.0.0.1", args);
    peer.child.kill("SIGKILL");
    await peer.stop();
    await expect(context.connect(peer.url)).rejects.toMatchObject({ code: ErrorCode.CONNECTION_REFUSED });
    await stillHealthy();
  });

  it("during the transfer: the pending write and reads reject within 1 s", async () => {
    const { peer, pipe } = await pipeTo();
    const ops = [pipe.write({ tensors: [{ buffer: big, targetDevice: CPU_DEVICE }] }), pipe.readMessage()];
    // Long enough for the transfer to be under way, too short for the echo:
    // cma moves 64 MiB each way in about 13 ms here, and once it did so in 15.
    await new Promise((r) => setTimeout(r, 5));
    const started = performance.now();
    peer.child.kill("SIGKILL");
    // The write may have finished before the kill; the echo cannot have.
    const [write, read] = await Promise.allSettled(ops);
    expect(performance.now() - started).toBeLessThan(1000);
    expect(read.status).toBe("rejected");
    if (write.status === "rejected") expect(write.reason.code).toMatch(FAILED);
    expect((read as PromiseRejectedResult).reason.code).toMatch(FAILED);
    await peer.stop();
    await stillHealthy();
  });

  it("after the transfer: reads waiting for the next message reject within 1 s", async () => {
    const { peer, pipe } = await pipeTo();
    const w = pipe.write({ tensors: [{ buffer: big, targetDevice: CPU_DEVICE }] });
    const echo = await pipe.readMessage();
    await w;
    expect(hasPattern(echo.tensors[0]!.buffer as Uint8Array, 7)).toBe(true);
    const pending = [pipe.readDescriptor(), pipe.readMessage()];
    const started = performance.now();
    peer.child.kill("SIGKILL");
    await expectAllRejected(pending, started);
    await expect(pipe.write({ metadata: "late" })).rejects.toMatchObject({ code: expect.stringMatching(FAILED) });
    await peer.stop();
    await stillHealthy();
  });
});
