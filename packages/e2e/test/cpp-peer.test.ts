/**
 * A live upstream C++ TensorPipe (Debian's libtensorpipe-dev, built into
 * cpp-peer/build/tp_peer) against our Context, both ways: it listens and we
 * connect, and it connects to our listener. It echoes every message; every
 * byte that comes back is checked. Without the library the tests say so and
 * skip, and fail where TP_REQUIRE_CPP_PEER=1 (CI).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { CPU_DEVICE, type Context, ErrorCode, type Message, type Pipe } from "@tensorpipe/core";
import { hasPattern, patterned, prng } from "@tensorpipe/core/testing";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";

const PEER = fileURLToPath(new URL("../cpp-peer/build/tp_peer", import.meta.url));
const built = existsSync(PEER);
const required = process.env.TP_REQUIRE_CPP_PEER === "1";
if (!built) {
  console.warn(`cpp-peer: ${PEER} is not built (install libtensorpipe-dev, then pnpm build): ${required ? "failing" : "skipping"} the C++ peer tests`);
}

const MiB = 1024 * 1024;

/** A running tp_peer and the JSON lines it printed. */
class CppPeer {
  readonly lines: Record<string, unknown>[] = [];
  private constructor(readonly child: ChildProcess) {
    let rest = "";
    child.stdout!.on("data", (d: Buffer) => {
      rest += d.toString();
      for (let i = rest.indexOf("\n"); i >= 0; i = rest.indexOf("\n")) {
        this.lines.push(JSON.parse(rest.slice(0, i)));
        rest = rest.slice(i + 1);
      }
    });
  }

  static async start(args: string[]): Promise<CppPeer> {
    if (!built) throw new Error(`${PEER} is not built: install libtensorpipe-dev (scripts/setup.sh does where it can), then pnpm build`);
    const peer = new CppPeer(spawn(PEER, args, { stdio: ["pipe", "pipe", "inherit"] }));
    const [exited] = await Promise.race([once(peer.child, "exit"), peer.firstLine()]);
    if (exited !== undefined) throw new Error(`tp_peer ${args.join(" ")} exited (${exited}) before saying where it is`);
    return peer;
  }

  /** Resolves with [undefined] once the peer has said where it is. */
  private firstLine(): Promise<[undefined]> {
    return new Promise((resolve) => {
      const look = () => (this.lines.length > 0 ? resolve([undefined]) : setTimeout(look, 10));
      look();
    });
  }

  get urls(): string[] {
    return this.lines[0]!.urls as string[];
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = once(this.child, "exit");
    this.child.stdin!.end();
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  }
}

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
  ["zero-length payloads and tensors", 3, [0, 0], [{ size: 0, targeted: true }, { size: 0, targeted: false }]],
  ["tensors without target devices", 4, [], [{ size: 100, targeted: false }, { size: 70_000, targeted: false }]],
  ["many payloads and tensors", 5, Array.from({ length: 16 }, (_, i) => i * 33), Array.from({ length: 64 }, (_, i) => ({ size: i * 517, targeted: i % 3 !== 0 }))],
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

describe.skipIf(!built && !required)("a live C++ TensorPipe peer", () => {
  let context: Context;
  const peers: CppPeer[] = [];
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
    ["uv + basic", "uv", "basic"],
    ["uv, shm + basic, cma, mpt (ours fall back to what interoperates)", "uv,shm", "basic,cma,mpt"],
  ])("listening, with %s: our client", (_, transports, channels) => {
    let peer: CppPeer;
    let pipe: Pipe;
    beforeAll(async () => {
      peer = await CppPeer.start(["listen", transports, channels]);
      pipe = await context.connect(peer.urls[0]!);
    });
    afterAll(async () => {
      pipe?.close();
      await peer?.stop();
    });

    it("negotiates uv and basic", () => {
      expect(pipe.transport).toBe("uv");
      expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("basic");
    });
    exchanges(() => pipe);
  });

  describe("connecting to our listener", () => {
    let peer: CppPeer;
    let pipe: Pipe;
    beforeAll(async () => {
      const listener = await context.listen("uv://127.0.0.1:0");
      peer = await CppPeer.start(["connect", "uv", "basic", listener.addresses()[0]!]);
      pipe = await listener.accept({ timeout: 10_000 });
      listener.close();
    });
    afterAll(async () => {
      pipe?.close();
      await peer?.stop();
    });

    exchanges(() => pipe);
  });

  it("fails every pending operation when the peer is killed mid-transfer", async () => {
    const peer = await CppPeer.start(["listen", "uv", "basic"]);
    peers.push(peer);
    const pipe = await context.connect(peer.urls[0]!);
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
