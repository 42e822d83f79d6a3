import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { ChannelContext } from "../channel.js";
import { Context } from "../context.js";
import { CPU_DEVICE, type Device, type TensorBuffer, isCpuBuffer } from "../device.js";
import { ErrorCode } from "../errors.js";
import type { Listener } from "../listener.js";
import type { Pipe } from "../pipe.js";
import type { TransportContext } from "../transport.js";
import { hasPattern, patterned, prng } from "./patterns.js";

export interface ChannelConformanceOptions {
  /** The channel's registered name, e.g. "basic". */
  name: string;
  /** Tells apart several runs of one channel in test names ("inline off"). */
  variant?: string;
  create(): ChannelContext | Promise<ChannelContext>;
  /** The transport the pipe runs on, registered under `transportName`. */
  createTransport(): TransportContext | Promise<TransportContext>;
  transportName: string;
  /** A URL to listen on, e.g. "uv://127.0.0.1:0". */
  listenUrl(): string;
  largeTensorBytes?: number;
  /** Where the tensors live (default: CPU memory). */
  memory?: ConformanceMemory;
  /** Messages kept in flight each way by the in-flight test (default 500). */
  inFlight?: number;
}

/**
 * The memory a channel's tensors live in, as the suite makes and checks
 * them: a GPU channel runs the suite on its device's memory.
 */
export interface ConformanceMemory {
  /** The device the tensors are on, and their target device. */
  device: Device;
  /** A buffer on the device holding `host`'s bytes. */
  from(host: Uint8Array): TensorBuffer | Promise<TensorBuffer>;
  /** A buffer of `bytes` on the device to read into. */
  alloc(bytes: number): TensorBuffer | Promise<TensorBuffer>;
  /** The first `bytes` of `buffer`, copied to the host. */
  toHost(buffer: TensorBuffer, bytes: number): Uint8Array | Promise<Uint8Array>;
  /** Gives a buffer back once the suite is done with it. */
  free?(buffer: TensorBuffer): void;
}

/** CPU memory: the tensors are the host's bytes. */
export const CPU_MEMORY: ConformanceMemory = {
  device: CPU_DEVICE,
  from: (host) => host,
  alloc: (bytes) => new Uint8Array(bytes),
  toHost: (buffer, bytes) => {
    if (!isCpuBuffer(buffer)) throw new Error("not CPU memory");
    return new Uint8Array(buffer.buffer, buffer.byteOffset, bytes);
  },
};

const MiB = 1024 * 1024;
const cpu = CPU_DEVICE;

/**
 * The behaviour every channel must have, exercised through real pipes
 * between two contexts that have only this channel.
 */
export function describeChannelConformance(options: ChannelConformanceOptions): void {
  const variant = options.variant ? ` (${options.variant})` : "";
  const memory = options.memory ?? CPU_MEMORY;
  const onCpu = memory === CPU_MEMORY;
  const dev = memory.device;
  const inFlight = options.inFlight ?? 500;
  describe(`channel conformance: ${options.name} over ${options.transportName}${variant}`, () => {
    let contexts: Context[] = [];
    let listener: Listener;
    let client: Pipe;
    let server: Pipe;
    let made: TensorBuffer[] = [];

    /** A tensor on the device holding `patterned(bytes, seed)`. */
    async function tensor(bytes: number, seed: number): Promise<TensorBuffer> {
      const b = await memory.from(patterned(bytes, seed));
      made.push(b);
      return b;
    }

    /** The next message, its tensors read into fresh device memory and copied back to the host. */
    async function receive(p: Pipe) {
      const d = await p.readDescriptor();
      const targets = await Promise.all(d.tensors.map((t) => memory.alloc(t.length)));
      made.push(...targets);
      const payloads = d.payloads.map((x) => new Uint8Array(x.length));
      await p.read({ payloads: payloads.map((data) => ({ data })), tensors: targets.map((buffer) => ({ buffer })) });
      const tensors = await Promise.all(targets.map((b, i) => memory.toHost(b, d.tensors[i]!.length)));
      return { descriptor: d, payloads, tensors };
    }

    async function makeContext(): Promise<Context> {
      const ctx = new Context();
      ctx.registerTransport(0, options.transportName, await options.createTransport());
      ctx.registerChannel(0, options.name, await options.create());
      contexts.push(ctx);
      return ctx;
    }

    beforeEach(async () => {
      const [a, b] = [await makeContext(), await makeContext()];
      listener = await a.listen(options.listenUrl());
      [client, server] = await Promise.all([b.connect(listener.addresses()[0]!), listener.accept()]);
    });

    afterEach(async () => {
      await Promise.all(contexts.map((c) => c.close()));
      contexts = [];
      if (memory.free) made.forEach((b) => memory.free!(b));
      made = [];
    });

    it(`is negotiated for ${dev.type} to ${dev.type} on both ends`, () => {
      expect(client.channelFor(dev, dev)).toBe(options.name);
      expect(server.channelFor(dev, dev)).toBe(options.name);
    });

    it("delivers tensors intact and in order, with payloads and metadata", async () => {
      const rand = prng(7);
      const sizes = Array.from({ length: 100 }, () => Math.floor(rand() ** 3 * 1_000_000));
      const sources = await Promise.all(sizes.map((n, i) => tensor(n, i + 1)));
      const writes = sizes.map((n, i) =>
        client.write({
          metadata: `m${i}`,
          payloads: [{ data: patterned(i, i), metadata: `p${i}` }],
          tensors: [{ buffer: sources[i]!, length: n, targetDevice: dev, metadata: `t${i}` }],
        }),
      );
      for (let i = 0; i < sizes.length; i++) {
        const m = await receive(server);
        expect(m.descriptor.metadata).toBe(`m${i}`);
        expect(m.descriptor.payloads[0]!.metadata).toBe(`p${i}`);
        expect(hasPattern(m.payloads[0]!, i)).toBe(true);
        expect(m.descriptor.tensors[0]!.metadata).toBe(`t${i}`);
        expect(m.descriptor.tensors[0]!.length).toBe(sizes[i]);
        expect(hasPattern(m.tensors[0]!, i + 1)).toBe(true);
      }
      await Promise.all(writes);
    });

    it(`keeps ${inFlight} messages in flight in both directions`, async () => {
      const n = inFlight;
      const send = async (p: Pipe, base: number) => {
        const tensors = await Promise.all(Array.from({ length: n }, (_, i) => Promise.all([tensor(100 + i, base + i), tensor(3, i)])));
        return tensors.map(([a, b], i) => p.write({ tensors: [{ buffer: a!, length: 100 + i, targetDevice: dev }, { buffer: b!, length: 3, targetDevice: dev }] }));
      };
      const writes = [...(await send(client, 0)), ...(await send(server, 10_000))];
      const receiveAll = async (p: Pipe, base: number) => {
        for (let i = 0; i < n; i++) {
          const m = await receive(p);
          expect(hasPattern(m.tensors[0]!, base + i)).toBe(true);
          expect(hasPattern(m.tensors[1]!, i)).toBe(true);
        }
      };
      await Promise.all([receiveAll(server, 0), receiveAll(client, 10_000), ...writes]);
    });

    it("carries zero-length tensors among others, and messages with nothing in them", async () => {
      const none = await tensor(0, 0);
      const [five, seven] = [await tensor(5, 1), await tensor(7, 2)];
      const empty = (buffer: TensorBuffer) => ({ buffer, length: 0, targetDevice: dev });
      const w = Promise.all([
        client.write({}),
        client.write({ tensors: [empty(none), empty(none)] }),
        client.write({ payloads: [{ data: new Uint8Array(0) }], tensors: [empty(none), { buffer: five, length: 5, targetDevice: dev }, empty(none)] }),
        client.write({ tensors: [{ buffer: seven, length: 7, targetDevice: dev }] }),
      ]);
      const nothing = await receive(server);
      expect(nothing.descriptor).toMatchObject({ metadata: "", payloads: [], tensors: [] });
      const zeros = await receive(server);
      expect(zeros.tensors.map((t) => t.length)).toEqual([0, 0]);
      const mixed = await receive(server);
      expect(mixed.payloads[0]!.length).toBe(0);
      expect(mixed.tensors.map((t) => t.length)).toEqual([0, 5, 0]);
      expect(hasPattern(mixed.tensors[1]!, 1)).toBe(true);
      const after = await receive(server);
      expect(hasPattern(after.tensors[0]!, 2)).toBe(true);
      await w;
    });

    it("lets the reader choose the target device when the writer did not (DescriptorReply)", async () => {
      const sizes = [1000, 10, 100_000];
      const sources = await Promise.all(sizes.map((n, i) => tensor(n, i + 1)));
      const w = client.write({
        tensors: sources.map((buffer, i) => ({ buffer, length: sizes[i]!, targetDevice: i === 1 ? dev : null })),
      });
      const m = await receive(server);
      expect(m.descriptor.tensors.map((t) => t.targetDevice)).toEqual([undefined, dev, undefined]);
      m.tensors.forEach((b, i) => expect(hasPattern(b, i + 1)).toBe(true));
      await w;
    });

    it.runIf(onCpu)("lands tensors in typed arrays at an offset, sending only `length` bytes", async () => {
      const src = new Float32Array([1, 2, 3, 4, 5, 6]);
      const w = client.write({ tensors: [{ buffer: src.subarray(1), length: 8, targetDevice: cpu }] });
      const d = await server.readDescriptor();
      expect(d.tensors[0]!.length).toBe(8);
      const backing = new Float32Array(8);
      await server.read({ payloads: [], tensors: [{ buffer: backing.subarray(4) }] });
      expect([...backing]).toEqual([0, 0, 0, 0, 2, 3, 0, 0]);
      await w;
    });

    it("moves a large tensor", async () => {
      const size = options.largeTensorBytes ?? 256 * MiB;
      const w = client.write({ tensors: [{ buffer: await tensor(size, 9), length: size, targetDevice: dev }] });
      const m = await receive(server);
      expect(hasPattern(m.tensors[0]!, 9)).toBe(true);
      await w;
    });

    it("rejects an allocation that does not fit, and then accepts one that does", async () => {
      const w = client.write({ payloads: [{ data: patterned(10, 1) }], tensors: [{ buffer: await tensor(20, 2), length: 20, targetDevice: dev }] });
      await server.readDescriptor();
      const t = await memory.alloc(20);
      made.push(t);
      await expect(server.read({ payloads: [{ data: new Uint8Array(9) }], tensors: [{ buffer: t }] })).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
      });
      await expect(server.read({ payloads: [], tensors: [] })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      const p = new Uint8Array(10);
      await server.read({ payloads: [{ data: p }], tensors: [{ buffer: t }] });
      expect(hasPattern(p, 1) && hasPattern(await memory.toHost(t, 20), 2)).toBe(true);
      await w;
    });

    it.runIf(onCpu)("ends the reader's stream when the peer closes between messages", async () => {
      const got: number[] = [];
      const reading = (async () => {
        for await (const m of server) got.push(m.tensors[0]!.length);
      })();
      // A channel may complete a write only once the reader has the bytes.
      await client.write({ tensors: [{ buffer: patterned(10, 1), targetDevice: cpu }] });
      client.close();
      await reading;
      expect(got).toEqual([10]);
      await expect(server.readDescriptor()).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
      expect((await server.closed).code).toBe(ErrorCode.PEER_CLOSED);
    });

    it("rejects every pending operation when the peer goes away", async () => {
      const pendingRead = server.readDescriptor();
      // Waits for a DescriptorReply the peer will never send.
      // Left to the reader: the write waits for its answer.
      const pendingWrite = server.write({ tensors: [{ buffer: await tensor(10, 1), length: 10, targetDevice: null }] });
      const d = await client.readDescriptor();
      expect(d.tensors[0]!.length).toBe(10);
      client.close();
      await expect(pendingRead).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
      await expect(pendingWrite).rejects.toMatchObject({ code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/) });
      await expect(server.write({})).rejects.toMatchObject({ code: expect.stringMatching(/^ERR_TP_/) });
    });

    it("rejects pending operations with ERR_TP_CLOSED when closed locally", async () => {
      const pendingRead = server.readDescriptor();
      // Left to the reader: the write waits for its answer.
      const pendingWrite = server.write({ tensors: [{ buffer: await tensor(10, 1), length: 10, targetDevice: null }] });
      server.close();
      await expect(pendingRead).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await expect(pendingWrite).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await expect(server.readMessage()).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      // The descriptor went out before the close; its tensor never will.
      await expect(receive(client)).rejects.toMatchObject({
        code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/),
      });
      await expect(client.readDescriptor()).rejects.toMatchObject({
        code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/),
      });
    });
  });
}
