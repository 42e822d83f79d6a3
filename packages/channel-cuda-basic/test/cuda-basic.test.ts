import { setTimeout as sleep } from "node:timers/promises";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { CmaChannelContext } from "@tensorpipe/channel-cma";
import { CPU_DEVICE, type Channel, type ChannelContext, Context, type Pipe, cudaBuffer } from "@tensorpipe/core/backend";
import { hasPattern, patterned } from "@tensorpipe/core/testing";
import {
  allocateCuda,
  copyToDevice,
  copyToHost,
  createStream,
  cudaSlice,
  cudaViability,
  destroyStream,
  fillDevice,
  freeCuda,
  pinnedHostBuffer,
} from "@tensorpipe/cuda";
import { UvTransport } from "@tensorpipe/transport-uv";
import { afterEach, describe, expect, it } from "vitest";
import { CudaBasicChannelContext, type CudaBasicRegistration, PinnedPool, registerCudaBasicChannel } from "../src/index.js";

const MiB = 1024 * 1024;
const viability = cudaViability();
const gpu = viability.viable;
if (!gpu) console.log(`GPU tests skipped: ${viability.reason}`);

const contexts: Context[] = [];
afterEach(async () => {
  await Promise.all(contexts.splice(0).map((c) => c.close()));
});

/** A pipe between two contexts with cuda-basic, each made with its options: `a` listened, `b` dialled. */
async function pipes(options: CudaBasicRegistration = {}, dialler: CudaBasicRegistration = options): Promise<{ a: Pipe; b: Pipe }> {
  const make = (own: CudaBasicRegistration) => {
    const ctx = new Context();
    ctx.registerTransport(0, "uv", new UvTransport());
    registerBasicChannel(ctx);
    registerCudaBasicChannel(ctx, { chunkBytes: 1 * MiB, poolChunks: 4, ...own });
    contexts.push(ctx);
    return ctx;
  };
  const listener = await make(options).listen("uv://127.0.0.1:0");
  const [b, a] = await Promise.all([make(dialler).connect(listener.addresses()[0]!), listener.accept()]);
  return { a, b };
}

describe("cuda-basic channel anywhere", () => {
  it("pairs GPUs only through equal CPU-channel descriptors", () => {
    const c = new CudaBasicChannelContext();
    expect(c.canCommunicateWithRemote("cuda-basic/any", "cuda-basic/any")).toBe(true);
    expect(c.canCommunicateWithRemote("cuda-basic/any", "any")).toBe(false);
    expect(c.numConnectionsNeeded()).toBe(1);
  });

  it("refuses an alsoOver entry that is not a channel's context, saying what it takes", () => {
    const context = new Context();
    expect(() => registerCudaBasicChannel(context, { alsoOver: { cma: "cma" as never } })).toThrow(
      expect.objectContaining({
        code: "ERR_TP_INVALID_ARG",
        message: expect.stringMatching(/alsoOver\.cma must be a CPU channel's context \(e\.g\. new CmaChannelContext\(\)\), got the string "cma"/),
      }),
    );
    expect(() => registerCudaBasicChannel(context, { alsoOver: { "c m a": new CmaChannelContext() } })).toThrow(
      expect.objectContaining({ code: "ERR_TP_INVALID_ARG", message: expect.stringMatching(/"c m a" cannot name a channel/) }),
    );
    for (const [options, priority, text] of [
      [null, undefined, /options must be an object/],
      [{ alsoOver: null }, undefined, /alsoOver must be an object of CPU channels by name, .* got null/],
      [{ alsoOver: [new CmaChannelContext()] }, undefined, /alsoOver must be an object .* got an Array/],
      [{ alsoOver: { "": new CmaChannelContext() } }, undefined, /alsoOver: "" cannot name a channel/],
      [{ alsoOver: { cb: new CudaBasicChannelContext() } }, undefined, gpu ? /alsoOver\.cb serves no CPU memory/ : undefined],
      [{}, "100", /priority must be a finite number, got the string "100"/],
      [{}, Number.NaN, /priority must be a finite number/],
    ] as const) {
      if (!text) continue;
      expect(() => registerCudaBasicChannel(context, options as never, priority as never)).toThrow(
        expect.objectContaining({ code: "ERR_TP_INVALID_ARG", message: expect.stringMatching(text) }),
      );
    }
    // Nothing was registered by the calls refused.
    expect(context.backends().map((b) => b.name)).toEqual([]);
  });

  it("hands out staging chunks up to its size, then in the order asked", async () => {
    const pool = new PinnedPool(16, 2, (n) => new Uint8Array(n));
    const [x, y] = [await pool.take(), await pool.take()];
    const order: string[] = [];
    const later = [
      pool.take().then((c) => order.push(c === y ? "first:y" : "first:?")),
      pool.take().then((c) => order.push(c === x ? "second:x" : "second:?")),
    ];
    pool.give(y);
    pool.give(x);
    await Promise.all(later);
    expect(order).toEqual(["first:y", "second:x"]);
    expect(pool.size).toBe(2);
  });

  it.skipIf(gpu)("is not viable without a GPU, says why, and leaves CPU tensors to the CPU channels", async () => {
    const c = new CudaBasicChannelContext();
    expect(c.isViable()).toEqual({ viable: false, reason: viability.reason });
    expect(c.deviceDescriptors()).toEqual([]);
    const { a, b } = await pipes();
    expect(b.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("basic");
    const w = b.write({ tensors: [{ buffer: patterned(1000, 1), targetDevice: CPU_DEVICE }] });
    expect(hasPattern((await a.readMessage()).tensors[0]!.buffer as Uint8Array, 1)).toBe(true);
    await w;
  });
});

describe.skipIf(!gpu)("cuda-basic channel on a GPU", () => {
  const cuda0 = { type: "cuda", index: 0 } as const;

  it("is negotiated for GPU to GPU, basic staying for CPU", async () => {
    const { a, b } = await pipes();
    expect(b.channelFor(cuda0, cuda0)).toBe("cuda-basic");
    expect(a.channelFor(cuda0, cuda0)).toBe("cuda-basic");
    expect(b.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("basic");
  });

  it("stages over the fastest CPU channel both ends have, given alsoOver, and over its own where the peer has no other", async () => {
    const alsoOver = () => ({ alsoOver: { cma: new CmaChannelContext() } });
    const both = await pipes(alsoOver(), alsoOver());
    expect([both.a.channelFor(cuda0, cuda0), both.b.channelFor(cuda0, cuda0)]).toEqual(["cuda-basic-cma", "cuda-basic-cma"]);
    expect(both.b.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("basic");
    const source = allocateCuda(3 * MiB);
    const target = allocateCuda(3 * MiB);
    try {
      await copyToDevice(source, patterned(3 * MiB, 4));
      const write = both.b.write({ tensors: [{ buffer: source, targetDevice: cuda0 }] });
      await both.a.readDescriptor();
      await both.a.read({ payloads: [], tensors: [{ buffer: target }] });
      await write;
      const back = new Uint8Array(3 * MiB);
      await copyToHost(back, target);
      expect(hasPattern(back, 4)).toBe(true);
    } finally {
      freeCuda(source);
      freeCuda(target);
    }
    const one = await pipes(alsoOver(), {});
    expect([one.a.channelFor(cuda0, cuda0), one.b.channelFor(cuda0, cuda0)]).toEqual(["cuda-basic", "cuda-basic"]);
  });

  it("moves GPU tensors of many sizes, several in flight, into the reader's GPU memory", async () => {
    const { a, b } = await pipes();
    const sizes = [0, 1, MiB - 1, MiB, 3 * MiB + 5, 20 * MiB];
    const sources = await Promise.all(
      sizes.map(async (n, i) => {
        const buf = allocateCuda(n);
        if (n > 0) await copyToDevice(buf, patterned(n, i + 1));
        return buf;
      }),
    );
    const targets = sizes.map((n) => allocateCuda(n + 64));
    try {
      const writes = sources.map((buffer, i) => b.write({ metadata: `t${i}`, tensors: [{ buffer, length: sizes[i], targetDevice: cuda0 }] }));
      for (let i = 0; i < sizes.length; i++) {
        const d = await a.readDescriptor();
        expect(d.metadata).toBe(`t${i}`);
        expect(d.tensors[0]).toMatchObject({ length: sizes[i], targetDevice: cuda0 });
        await a.read({ payloads: [], tensors: [{ buffer: cudaSlice(targets[i]!, 64, sizes[i]!) }] });
        const back = new Uint8Array(sizes[i]!);
        if (back.length > 0) await copyToHost(back, cudaSlice(targets[i]!, 64, sizes[i]!));
        expect(hasPattern(back, i + 1)).toBe(true);
      }
      await Promise.all(writes);
    } finally {
      [...sources, ...targets].forEach(freeCuda);
    }
  });

  it("hands the CPU channel several chunks at once, not each after the one before has reached the peer", async () => {
    // cma, whose send settles once the peer has read the chunk, with each of
    // its channels' sends in flight counted, and settling 5 ms later, as
    // over a slower link: longer than a copy off the emulated GPU (0.5 ms),
    // so that chunks copied meanwhile are handed over while it is in flight.
    let inFlight = 0;
    let most = 0;
    const counted = (basic: ChannelContext): ChannelContext =>
      Object.assign(Object.create(basic) as ChannelContext, {
        createChannel: (...args: Parameters<ChannelContext["createChannel"]>): Channel => {
          const channel = basic.createChannel(...args);
          const send = channel.send.bind(channel);
          channel.send = (buffer, length) => {
            most = Math.max(most, ++inFlight);
            return send(buffer, length)
              .then(() => sleep(5))
              .finally(() => inFlight--);
          };
          return channel;
        },
      });
    const { a, b } = await pipes({ cpuChannel: counted(new CmaChannelContext()) });
    const source = allocateCuda(16 * MiB);
    const target = allocateCuda(16 * MiB);
    try {
      await copyToDevice(source, patterned(16 * MiB, 5));
      const write = b.write({ tensors: [{ buffer: source, targetDevice: cuda0 }] });
      await a.readDescriptor();
      await a.read({ payloads: [], tensors: [{ buffer: target }] });
      await write;
      const back = new Uint8Array(16 * MiB);
      await copyToHost(back, target);
      expect(hasPattern(back, 5)).toBe(true);
      // 16 chunks of 1 MiB through a pool of 4.
      expect(most).toBeGreaterThan(1);
    } finally {
      freeCuda(source);
      freeCuda(target);
    }
  });

  it("waits for the work still queued on a tensor's stream when it is written", async () => {
    const { a, b } = await pipes();
    const n = 3 * MiB + 5;
    const stream = createStream(0);
    const src = allocateCuda(n + 1);
    const target = allocateCuda(n);
    const staging = pinnedHostBuffer(n);
    staging.set(patterned(n, 9));
    try {
      // A hundred small fills first (50 ms on the emulator), then the copy that makes the tensor.
      const queued = Array.from({ length: 100 }, (_, k) => fillDevice(cudaSlice(src, n, 1), k, 1, { stream }));
      queued.push(copyToDevice(src, staging, { stream }));
      const w = b.write({ tensors: [{ buffer: cudaBuffer(src.ptr, n, { stream }), targetDevice: cuda0 }] });
      await a.readDescriptor();
      await a.read({ payloads: [], tensors: [{ buffer: target }] });
      const back = new Uint8Array(n);
      await copyToHost(back, target);
      expect(hasPattern(back, 9)).toBe(true);
      await Promise.all([w, ...queued]);
    } finally {
      destroyStream(stream);
      freeCuda(src);
      freeCuda(target);
    }
  });

  it("rejects pending GPU transfers when the peer goes away", async () => {
    const { a, b } = await pipes();
    const src = allocateCuda(8 * MiB);
    try {
      const w = b.write({ tensors: [{ buffer: src, targetDevice: cuda0 }] });
      await a.readDescriptor();
      a.close();
      await expect(w).rejects.toMatchObject({ code: expect.stringMatching(/ERR_TP_(PEER_CLOSED|CONNECTION_RESET)/) });
    } finally {
      freeCuda(src);
    }
  });
});
