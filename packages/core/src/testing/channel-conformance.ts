import { SUITE_TIMEOUT_MS, afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "./vitest.js";
import type { ChannelContext } from "../channel.js";
import { Context } from "../context.js";
import { CPU_DEVICE } from "../device.js";
import { ErrorCode } from "../errors.js";
import type { Listener } from "../listener.js";
import type { TransportContext } from "../transport.js";
import { CPU_MEMORY, type ConformanceMemory, type ConformanceSide, LocalSide, type MessageSpec, matches } from "./conformance-side.js";
import { hasPattern, patterned, prng } from "./patterns.js";
import { RemoteSide } from "./remote-side.js";

export interface ChannelConformanceOptions {
  /** The channel's registered name, e.g. "basic". */
  name: string;
  /** Tells apart several runs of one channel in test names ("inline off"). */
  variant?: string | undefined;
  create(): ChannelContext | Promise<ChannelContext>;
  /** The transport the pipe runs on, registered under `transportName`. */
  createTransport(): TransportContext | Promise<TransportContext>;
  transportName: string;
  /** A URL to listen on, e.g. "uv://127.0.0.1:0". */
  listenUrl(): string;
  largeTensorBytes?: number | undefined;
  /** Where the tensors live (default: CPU memory). */
  memory?: ConformanceMemory | undefined;
  /** Messages kept in flight each way by the in-flight test (default 500). */
  inFlight?: number | undefined;
  /**
   * A module (path or file URL of plain JavaScript) exporting
   * `conformancePeer`: when given, the connecting end runs in a second
   * process made from it, for channels that cannot connect to themselves
   * in one process (CUDA IPC). Tests that need both ends in one process
   * are skipped then.
   */
  peerProcess?: string | URL | undefined;
  /** Each test's and hook's time limit in ms (default 60,000, whatever the runner's default). */
  timeout?: number | undefined;
}

const MiB = 1024 * 1024;
const cpu = CPU_DEVICE;
const PEER_GONE = /ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/;

/**
 * The behaviour every channel must have, exercised through real pipes
 * between two contexts that have only this channel: both in this process,
 * or the connecting one in a peer process (`peerProcess`).
 */
export function describeChannelConformance(options: ChannelConformanceOptions): void {
  const variant = options.variant ? ` (${options.variant})` : "";
  const memory = options.memory ?? CPU_MEMORY;
  const dev = memory.device;
  const inFlight = options.inFlight ?? 500;
  const remote = options.peerProcess !== undefined;
  // Tests that hold both ends' pipes, on CPU memory.
  const bothEndsHere = memory === CPU_MEMORY && !remote;
  const where = remote ? ", the connecting end in a peer process" : "";
  const timeout = options.timeout ?? SUITE_TIMEOUT_MS;
  describe(`channel conformance: ${options.name} over ${options.transportName}${variant}${where}`, { timeout }, () => {
    let contexts: Context[] = [];
    let listener: Listener;
    /** The connecting end. */
    let client: ConformanceSide;
    /** The listening end, always in this process. */
    let server: LocalSide;
    let peer: RemoteSide | undefined;

    async function makeContext(): Promise<Context> {
      const ctx = new Context();
      ctx.registerTransport(0, options.transportName, await options.createTransport());
      ctx.registerChannel(0, options.name, await options.create());
      contexts.push(ctx);
      return ctx;
    }

    /** The client's pipe, in tests that run only with both ends here. */
    const clientPipe = () => (client as LocalSide).pipe;

    if (remote) {
      beforeAll(() => {
        peer = new RemoteSide(options.peerProcess!);
      }, timeout);
      afterAll(() => peer?.stop(), timeout);
    }

    beforeEach(async () => {
      listener = await (await makeContext()).listen(options.listenUrl());
      const url = listener.addresses()[0]!;
      if (peer) {
        const [, accepted] = await Promise.all([peer.connect(url, options.name, options.transportName), listener.accept()]);
        [client, server] = [peer, new LocalSide(accepted, memory)];
      } else {
        const b = await makeContext();
        const [connected, accepted] = await Promise.all([b.connect(url), listener.accept()]);
        [client, server] = [new LocalSide(connected, memory), new LocalSide(accepted, memory)];
      }
    }, timeout);

    afterEach(async () => {
      await Promise.all([...contexts.map((c) => c.close()), peer?.reset()]);
      contexts = [];
      server?.release();
      if (client instanceof LocalSide) client.release();
    }, timeout);

    it(`is negotiated for ${dev.type} to ${dev.type} on both ends`, async () => {
      expect(await client.channelFor()).toBe(options.name);
      expect(await server.channelFor()).toBe(options.name);
    });

    it("delivers tensors intact and in order, with payloads and metadata", async () => {
      const rand = prng(7);
      const sizes = Array.from({ length: 100 }, () => Math.floor(rand() ** 3 * 1_000_000));
      const writes = sizes.map((n, i) =>
        client.write({
          metadata: `m${i}`,
          payloads: [{ length: i, seed: i, metadata: `p${i}` }],
          tensors: [{ length: n, seed: i + 1, metadata: `t${i}` }],
        }),
      );
      for (let i = 0; i < sizes.length; i++) {
        const m = await server.receive();
        expect(m.descriptor.metadata).toBe(`m${i}`);
        expect(m.descriptor.payloads[0]!.metadata).toBe(`p${i}`);
        expect(matches(m.payloads[0]!, i)).toBe(true);
        expect(m.descriptor.tensors[0]!.metadata).toBe(`t${i}`);
        expect(m.descriptor.tensors[0]!.length).toBe(sizes[i]);
        expect(matches(m.tensors[0]!, i + 1)).toBe(true);
      }
      await Promise.all(writes);
    });

    it(`keeps ${inFlight} messages in flight in both directions`, async () => {
      const n = inFlight;
      const send = (side: ConformanceSide, base: number) =>
        Array.from({ length: n }, (_, i) =>
          side.write({
            tensors: [
              { length: 100 + i, seed: base + i },
              { length: 3, seed: i },
            ],
          }),
        );
      const writes = [...send(client, 0), ...send(server, 10_000)];
      const receiveAll = async (side: ConformanceSide, base: number) => {
        for (let i = 0; i < n; i++) {
          const m = await side.receive();
          expect(matches(m.tensors[0]!, base + i)).toBe(true);
          expect(matches(m.tensors[1]!, i)).toBe(true);
        }
      };
      await Promise.all([receiveAll(server, 0), receiveAll(client, 10_000), ...writes]);
    });

    it("carries zero-length tensors among others, and messages with nothing in them", async () => {
      const empty = { length: 0, seed: 0 };
      const w = Promise.all([
        client.write({}),
        client.write({ tensors: [empty, empty] }),
        client.write({ payloads: [{ length: 0, seed: 0 }], tensors: [empty, { length: 5, seed: 1 }, empty] }),
        client.write({ tensors: [{ length: 7, seed: 2 }] }),
      ]);
      const nothing = await server.receive();
      expect(nothing.descriptor).toMatchObject({ metadata: "", payloads: [], tensors: [] });
      const zeros = await server.receive();
      expect(zeros.tensors.map((t) => t.length)).toEqual([0, 0]);
      const mixed = await server.receive();
      expect(mixed.payloads[0]!.length).toBe(0);
      expect(mixed.tensors.map((t) => t.length)).toEqual([0, 5, 0]);
      expect(matches(mixed.tensors[1]!, 1)).toBe(true);
      const after = await server.receive();
      expect(matches(after.tensors[0]!, 2)).toBe(true);
      await w;
    });

    it("lets the reader choose the target device when the writer did not (DescriptorReply)", async () => {
      const sizes = [1000, 10, 100_000];
      const w = client.write({ tensors: sizes.map((length, i) => ({ length, seed: i + 1, target: i === 1 ? "device" : null })) });
      const m = await server.receive();
      expect(m.descriptor.tensors.map((t) => t.targetDevice)).toEqual([undefined, dev, undefined]);
      m.tensors.forEach((b, i) => expect(matches(b, i + 1)).toBe(true));
      await w;
    });

    it.runIf(bothEndsHere)("lands tensors in typed arrays at an offset, sending only `length` bytes", async () => {
      const src = new Float32Array([1, 2, 3, 4, 5, 6]);
      const w = clientPipe().write({ tensors: [{ buffer: src.subarray(1), length: 8, targetDevice: cpu }] });
      const d = await server.pipe.readDescriptor();
      expect(d.tensors[0]!.length).toBe(8);
      const backing = new Float32Array(8);
      await server.pipe.read({ payloads: [], tensors: [{ buffer: backing.subarray(4) }] });
      expect([...backing]).toEqual([0, 0, 0, 0, 2, 3, 0, 0]);
      await w;
    });

    it("moves a large tensor", async () => {
      const size = options.largeTensorBytes ?? 256 * MiB;
      const w = client.write({ tensors: [{ length: size, seed: 9 }] });
      const m = await server.receive();
      expect(matches(m.tensors[0]!, 9)).toBe(true);
      await w;
    });

    it("rejects an allocation that does not fit, and then accepts one that does", async () => {
      const w = client.write({ payloads: [{ length: 10, seed: 1 }], tensors: [{ length: 20, seed: 2 }] });
      await server.pipe.readDescriptor();
      const t = await server.alloc(20);
      await expect(server.pipe.read({ payloads: [{ data: new Uint8Array(9) }], tensors: [{ buffer: t }] })).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
      });
      await expect(server.pipe.read({ payloads: [], tensors: [] })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      const p = new Uint8Array(10);
      await server.pipe.read({ payloads: [{ data: p }], tensors: [{ buffer: t }] });
      expect(hasPattern(p, 1) && hasPattern(await memory.toHost(t, 20), 2)).toBe(true);
      await w;
    });

    it.runIf(bothEndsHere)("ends the reader's stream when the peer closes between messages", async () => {
      const got: number[] = [];
      const reading = (async () => {
        for await (const m of server.pipe) got.push(m.tensors[0]!.length);
      })();
      // A channel may complete a write only once the reader has the bytes.
      await clientPipe().write({ tensors: [{ buffer: patterned(10, 1), targetDevice: cpu }] });
      clientPipe().close();
      await reading;
      expect(got).toEqual([10]);
      await expect(server.pipe.readDescriptor()).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
      expect((await server.pipe.closed).code).toBe(ErrorCode.PEER_CLOSED);
    });

    /** One tensor left to the reader: its write waits for the reader's answer. */
    const leftToReader: MessageSpec = { tensors: [{ length: 10, seed: 1, target: null }] };

    it("rejects every pending operation when the peer goes away", async () => {
      // Checked from the start: a peer process's close may land before its answer does.
      const pendingRead = expect(server.pipe.readDescriptor()).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
      // Waits for a DescriptorReply the peer will never send.
      const pendingWrite = expect(server.write(leftToReader)).rejects.toMatchObject({ code: expect.stringMatching(PEER_GONE) });
      const d = await client.readDescriptor();
      expect(d.tensors[0]!.length).toBe(10);
      await client.close();
      await pendingRead;
      await pendingWrite;
      await expect(server.pipe.write({})).rejects.toMatchObject({ code: expect.stringMatching(/^ERR_TP_/) });
    });

    it("rejects pending operations with ERR_TP_CLOSED when closed locally", async () => {
      const pendingRead = server.pipe.readDescriptor();
      // Made before the close, so that the write is pending when it comes.
      const message = { tensors: [{ buffer: await server.tensor(10, 1), length: 10, targetDevice: null }] };
      const pendingWrite = server.pipe.write(message);
      server.pipe.close();
      await expect(pendingRead).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await expect(pendingWrite).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await expect(server.pipe.readMessage()).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      // The descriptor went out before the close; its tensor never will.
      await expect(client.receive()).rejects.toMatchObject({ code: expect.stringMatching(PEER_GONE) });
      await expect(client.readDescriptor()).rejects.toMatchObject({ code: expect.stringMatching(PEER_GONE) });
    });
  });
}
