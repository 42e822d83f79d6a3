import { afterEach, beforeEach, describe, expect, it } from "vitest";
import type { ChannelContext } from "../channel.js";
import { Context } from "../context.js";
import { CPU_DEVICE } from "../device.js";
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
}

const MiB = 1024 * 1024;
const cpu = CPU_DEVICE;

/**
 * The behaviour every channel must have, exercised through real pipes
 * between two contexts that have only this channel.
 */
export function describeChannelConformance(options: ChannelConformanceOptions): void {
  const variant = options.variant ? ` (${options.variant})` : "";
  describe(`channel conformance: ${options.name} over ${options.transportName}${variant}`, () => {
    let contexts: Context[] = [];
    let listener: Listener;
    let client: Pipe;
    let server: Pipe;

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
    });

    it("is negotiated for CPU to CPU on both ends", () => {
      expect(client.channelFor(cpu, cpu)).toBe(options.name);
      expect(server.channelFor(cpu, cpu)).toBe(options.name);
    });

    it("delivers tensors intact and in order, with payloads and metadata", async () => {
      const rand = prng(7);
      const sizes = Array.from({ length: 100 }, () => Math.floor(rand() ** 3 * 1_000_000));
      const writes = sizes.map((n, i) =>
        client.write({
          metadata: `m${i}`,
          payloads: [{ data: patterned(i, i), metadata: `p${i}` }],
          tensors: [{ buffer: patterned(n, i + 1), targetDevice: cpu, metadata: `t${i}` }],
        }),
      );
      for (let i = 0; i < sizes.length; i++) {
        const m = await server.readMessage();
        expect(m.metadata).toBe(`m${i}`);
        expect(m.payloads[0]!.metadata).toBe(`p${i}`);
        expect(hasPattern(m.payloads[0]!.data, i)).toBe(true);
        expect(m.tensors[0]!.metadata).toBe(`t${i}`);
        expect(m.tensors[0]!.length).toBe(sizes[i]);
        expect(hasPattern(m.tensors[0]!.buffer as Uint8Array, i + 1)).toBe(true);
      }
      await Promise.all(writes);
    });

    it("keeps 500 messages in flight in both directions", async () => {
      const n = 500;
      const send = (p: Pipe, base: number) =>
        Array.from({ length: n }, (_, i) =>
          p.write({ tensors: [{ buffer: patterned(100 + i, base + i), targetDevice: cpu }, { buffer: patterned(3, i) }] }),
        );
      const writes = [...send(client, 0), ...send(server, 10_000)];
      const receive = async (p: Pipe, base: number) => {
        for (let i = 0; i < n; i++) {
          const m = await p.readMessage();
          expect(hasPattern(m.tensors[0]!.buffer as Uint8Array, base + i)).toBe(true);
          expect(hasPattern(m.tensors[1]!.buffer as Uint8Array, i)).toBe(true);
        }
      };
      await Promise.all([receive(server, 0), receive(client, 10_000), ...writes]);
    });

    it("carries zero-length tensors among others, and messages with nothing in them", async () => {
      const none = new Uint8Array(0);
      const w = Promise.all([
        client.write({}),
        client.write({ tensors: [{ buffer: none, targetDevice: cpu }, { buffer: none }] }),
        client.write({
          payloads: [{ data: none }],
          tensors: [{ buffer: none, targetDevice: cpu }, { buffer: patterned(5, 1), targetDevice: cpu }, { buffer: none }],
        }),
        client.write({ tensors: [{ buffer: patterned(7, 2), targetDevice: cpu }] }),
      ]);
      const empty = await server.readMessage();
      expect(empty).toEqual({ metadata: "", payloads: [], tensors: [] });
      const zeros = await server.readMessage();
      expect(zeros.tensors.map((t) => t.length)).toEqual([0, 0]);
      const mixed = await server.readMessage();
      expect(mixed.payloads[0]!.data.length).toBe(0);
      expect(mixed.tensors.map((t) => t.length)).toEqual([0, 5, 0]);
      expect(hasPattern(mixed.tensors[1]!.buffer as Uint8Array, 1)).toBe(true);
      const after = await server.readMessage();
      expect(hasPattern(after.tensors[0]!.buffer as Uint8Array, 2)).toBe(true);
      await w;
    });

    it("lets the reader choose the target device when the writer did not (DescriptorReply)", async () => {
      const w = client.write({
        tensors: [
          { buffer: patterned(1000, 1), targetDevice: null },
          { buffer: patterned(10, 2), targetDevice: cpu },
          { buffer: patterned(100_000, 3), targetDevice: null },
        ],
      });
      const d = await server.readDescriptor();
      expect(d.tensors.map((t) => t.targetDevice)).toEqual([undefined, cpu, undefined]);
      const buffers = d.tensors.map((t) => new Uint8Array(t.length));
      await server.read({ payloads: [], tensors: buffers.map((buffer) => ({ buffer })) });
      buffers.forEach((b, i) => expect(hasPattern(b, i + 1)).toBe(true));
      await w;
    });

    it("lands tensors in typed arrays at an offset, sending only `length` bytes", async () => {
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
      const src = patterned(size, 9);
      const w = client.write({ tensors: [{ buffer: src, targetDevice: cpu }] });
      const target = new Uint8Array(size);
      await server.readDescriptor();
      await server.read({ payloads: [], tensors: [{ buffer: target }] });
      expect(hasPattern(target, 9)).toBe(true);
      await w;
    });

    it("rejects an allocation that does not fit, and then accepts one that does", async () => {
      const w = client.write({ payloads: [{ data: patterned(10, 1) }], tensors: [{ buffer: patterned(20, 2) }] });
      await server.readDescriptor();
      await expect(
        server.read({ payloads: [{ data: new Uint8Array(9) }], tensors: [{ buffer: new Uint8Array(20) }] }),
      ).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      await expect(server.read({ payloads: [], tensors: [] })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      const p = new Uint8Array(10);
      const t = new Uint8Array(20);
      await server.read({ payloads: [{ data: p }], tensors: [{ buffer: t }] });
      expect(hasPattern(p, 1) && hasPattern(t, 2)).toBe(true);
      await w;
    });

    it("ends the reader's stream when the peer closes between messages", async () => {
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
      const pendingWrite = server.write({ tensors: [{ buffer: patterned(10, 1), targetDevice: null }] });
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
      const pendingWrite = server.write({ tensors: [{ buffer: patterned(10, 1), targetDevice: null }] });
      server.close();
      await expect(pendingRead).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await expect(pendingWrite).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await expect(server.readMessage()).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      // The descriptor went out before the close; its tensor never will.
      await expect(client.readMessage()).rejects.toMatchObject({
        code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/),
      });
      await expect(client.readDescriptor()).rejects.toMatchObject({
        code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/),
      });
    });
  });
}
