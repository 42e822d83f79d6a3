/**
 * Mutated and random frames into the libnop decoders and into a live
 * listener: no crash, no hang, no allocation driven by an unchecked length.
 * FUZZ_RUNS scales it (10^4 in CI; scripts/fuzz.sh runs the decoders at 10^6).
 */
import { randomBytes } from "node:crypto";
import { ErrorCode, NopWriter, type TensorPipeError } from "@tensorpipe/core/backend";
import { protocol, onTheWire, prng, upstreamSession } from "@tensorpipe/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { RawSocket } from "../raw-socket.js";
import { echoMetadata } from "../echo.js";

const RUNS = Number(process.env.FUZZ_RUNS ?? 10_000);
const hello = upstreamSession("basic").clientMain[0]!;
/** Every structured frame C++ TensorPipe wrote in both captured sessions (raw payload and tensor bytes aside). */
const seeds = [upstreamSession("basic"), upstreamSession("edge")]
  .flatMap((s) => [s.clientMain, s.serverMain, s.clientReply, s.serverReply, s.clientChannel, s.serverChannel].flat())
  .filter((f) => f.length > 5);

/** A frame derived from a captured one: bit flips, byte changes, cuts, splices, or pure noise. */
function mutate(rand: () => number): Uint8Array {
  const pick = (n: number) => Math.floor(rand() * n);
  if (rand() < 0.1) return randomBytes(pick(200));
  const out = Uint8Array.from(seeds[pick(seeds.length)]!);
  const edits = 1 + pick(4);
  for (let i = 0; i < edits; i++) {
    const at = pick(out.length);
    const r = rand();
    if (r < 0.4) out[at]! ^= 1 << pick(8);
    else if (r < 0.7) out[at] = [0x00, 0x7f, 0x80, 0x83, 0xff, 0xb9, 0xba, 0xbb, 0xbd, 0xbe][pick(10)]!;
    else if (r < 0.85) return out.subarray(0, at);
    else out.set(randomBytes(Math.min(8, out.length - at)), at);
  }
  return out;
}

const decoders = [protocol.decodePacket, protocol.decodeBrochure, protocol.decodeBrochureAnswer, protocol.decodeDescriptor, protocol.decodeDescriptorReply];

/**
 * A descriptor built field by field with hostile choices: counts and
 * lengths at, over and far over the limits, devices of any kind, metadata
 * of any bytes; then, sometimes, a count rewritten or the frame cut.
 */
function hostileDescriptor(rand: () => number, limits: protocol.DescriptorLimits): Uint8Array {
  const pick = (n: number) => Math.floor(rand() * n);
  const count = (limit: number) => [0, 1, pick(8), limit, limit + 1, pick(3 * limit)][pick(6)]!;
  const length = () => [0, 1, pick(1 << 20), limits.maxMessageBytes, 2 ** 53 - 1][pick(5)]!;
  const text = () => (rand() < 0.8 ? "" : Buffer.from(randomBytes(pick(12))).toString("latin1"));
  const device = () => (rand() < 0.7 ? { type: "cpu", index: 0 } : { type: ["cuda", "", "cpu"][pick(3)]!, index: pick(3) - 1 });
  const w = new NopWriter(64);
  const payloads = count(limits.maxPayloads);
  const tensors = count(limits.maxTensors);
  w.structure(3).string(text()).array(payloads);
  for (let i = 0; i < payloads && w.finish().length < 1 << 20; i++) w.structure(2).uint(length()).string(text());
  w.array(tensors);
  for (let i = 0; i < tensors && w.finish().length < 2 << 20; i++) {
    w.structure(4).uint(length());
    const d = device();
    w.structure(2).string(d.type).int(d.index);
    if (rand() < 0.5) w.empty();
    else w.structure(2).string("cpu").int(0);
    w.string(text());
  }
  const frame = Uint8Array.from(w.finish());
  if (rand() < 0.2) return frame.subarray(0, pick(frame.length));
  return frame;
}

describe("fuzzing", () => {
  it(`the descriptor decoder takes ${RUNS} hostile descriptors: within the limits or ERR_TP_PROTOCOL, in time linear in the frame`, () => {
    const rand = prng(4321);
    const limits = { maxPayloads: 64, maxTensors: 64, maxMessageBytes: 2 ** 32 };
    let accepted = 0;
    let bytes = 0;
    const started = performance.now();
    for (let i = 0; i < RUNS; i++) {
      const frame = hostileDescriptor(rand, limits);
      bytes += frame.length;
      try {
        const d = protocol.decodeDescriptor(frame, limits);
        accepted++;
        expect(d.payloads.length).toBeLessThanOrEqual(limits.maxPayloads);
        expect(d.tensors.length).toBeLessThanOrEqual(limits.maxTensors);
        const announced = [...d.payloads, ...d.tensors].reduce((n, e) => n + e.length, 0);
        expect(announced).toBeLessThanOrEqual(limits.maxMessageBytes);
      } catch (e) {
        expect((e as TensorPipeError).code).toBe(ErrorCode.PROTOCOL);
      }
    }
    expect(accepted).toBeGreaterThan(0);
    expect(accepted).toBeLessThan(RUNS);
    // Well under a microsecond a byte: no work driven by what was announced.
    expect(performance.now() - started).toBeLessThan(RUNS * 2 + bytes / 1000);
  });

  it(`the decoders take ${RUNS} mutated frames: a value or ERR_TP_PROTOCOL, nothing else`, () => {
    const rand = prng(1234);
    const started = performance.now();
    let accepted = 0;
    for (let i = 0; i < RUNS; i++) {
      const frame = mutate(rand);
      for (const decode of decoders) {
        try {
          decode(frame);
          accepted++;
        } catch (e) {
          expect((e as TensorPipeError).code).toBe(ErrorCode.PROTOCOL);
        }
      }
    }
    // Some mutations stay valid (a flipped metadata byte): the fuzzer is not only producing junk.
    expect(accepted).toBeGreaterThan(0);
    expect(performance.now() - started).toBeLessThan(RUNS * 2);
  });

  describe("a live listener", async () => {
    const server = await createContext({ handshakeTimeout: 2000, transports: ["uv"], channels: ["basic"] });
    const client = await createContext({ transports: ["uv"], channels: ["basic"] });
    let url: string;
    let port: number;
    let dropped = 0;

    beforeAll(async () => {
      const listener = await server.listen("uv://127.0.0.1:0");
      listener.on("connectionError", () => dropped++);
      url = listener.addresses()[0]!;
      port = Number(url.split(":").at(-1));
      echoMetadata(listener);
    });

    afterAll(async () => {
      await client.close();
      await server.close();
    });

    it(`takes ${RUNS} connections of mutated handshakes and keeps serving`, async () => {
      const rand = prng(99);
      const rssBefore = process.memoryUsage().rss;
      const BATCH = 100;
      for (let done = 0; done < RUNS; done += BATCH) {
        await Promise.all(
          Array.from({ length: Math.min(BATCH, RUNS - done) }, async () => {
            const s = await RawSocket.connect(port);
            // A valid or mutated first packet, then a mutated brochure.
            const first = rand() < 0.5 ? hello : mutate(rand);
            const bytes = rand() < 0.8 ? onTheWire([first, mutate(rand)]) : mutate(rand);
            s.write(bytes);
            s.socket.end();
            await s.closed;
          }),
        );
      }
      // Every connection was dropped with an error, or (rarely) became a pipe the peer then left.
      await expect.poll(() => dropped, { timeout: 10_000 }).toBeGreaterThan(RUNS * 0.9);
      expect(process.memoryUsage().rss - rssBefore).toBeLessThan(256 * 1024 * 1024);
      const pipe = await client.connect(url);
      await pipe.write({ metadata: "still serving" });
      expect((await pipe.readMessage()).metadata).toBe("still serving");
      pipe.close();
    });
  });
});
