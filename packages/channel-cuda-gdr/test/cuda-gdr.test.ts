import { spawnSync } from "node:child_process";
import { Context, ErrorCode } from "@tensorpipe/core/backend";
import { hasPattern, patterned } from "@tensorpipe/core/testing";
import { allocateCuda, copyToDevice, copyToHost, cudaSlice, freeCuda } from "@tensorpipe/cuda";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerUvTransport } from "@tensorpipe/transport-uv";
import { describe, expect, it } from "vitest";
import { CudaGdrChannelContext, NIC_DEPTH, Nic, QUEUE_DEPTH, registerCudaGdrChannel, rdmaPorts } from "../src/index.js";
import { type NativeAddon, type NativeNic, loadAddon } from "../src/native.js";

const viability = new CudaGdrChannelContext().isViable();
const viable = viability.viable;
if (!viable) console.log(`GPUDirect RDMA tests skipped: ${viability.reason}`);
const MiB = 1024 * 1024;
const packageRoot = new URL("..", import.meta.url).pathname;

describe("cuda-gdr where there is no RDMA", () => {
  it.skipIf(viable)("is not viable, says what is missing, advertises no GPU and never throws deciding", () => {
    const c = new CudaGdrChannelContext();
    const v = c.isViable();
    expect(v.viable).toBe(false);
    // These machines' kernels have no RDMA subsystem; elsewhere: no device, no active port, no GPU, no peermem.
    expect(!v.viable && v.reason).toMatch(/no RDMA|no InfiniBand or RoCE device|no RDMA device has an active port|CUDA|GPU|nvidia-peermem/);
    expect(c.deviceDescriptors()).toEqual([]);
    expect(rdmaPorts().ports).toEqual([]);
    expect(c.canCommunicateWithRemote("cuda-gdr/infiniband", "cuda-gdr/ethernet")).toBe(false);
  });

  // An addon built where rdma-core's headers were missing says that instead (setup installs them).
  it.skipIf(!loadAddon().addon?.IbvNic)("says so when libibverbs itself is missing", () => {
    const script = `import { CudaGdrChannelContext } from "./dist/index.js"; console.log(JSON.stringify(new CudaGdrChannelContext().isViable()));`;
    const r = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
      cwd: packageRoot,
      env: { ...process.env, TENSORPIPE_IBVERBS: "/nonexistent/libibverbs.so.1" },
      encoding: "utf8",
    });
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      viable: false,
      reason: expect.stringMatching(/^no RDMA: no libibverbs \(rdma-core's libibverbs1 package\): \/nonexistent\/libibverbs\.so\.1/),
    });
  });

  it("opening a device that cannot be opened is an error with a code, not a crash", () => {
    const addon = loadAddon().addon!;
    expect(() => new Nic(addon, "mlx5_0", 1, 0)).toThrow(expect.objectContaining({ code: expect.stringMatching(/^E[A-Z]+|^ERR_TP_/) }));
  });

  it.skipIf(viable)("is left out of negotiation: pipes still carry CPU tensors over the other channels", async () => {
    const context = new Context();
    registerUvTransport(context);
    registerBasicChannel(context);
    registerCudaGdrChannel(context);
    try {
      expect(context.backends()).toContainEqual(expect.objectContaining({ kind: "channel", name: "cuda-gdr", viability }));
      const listener = await context.listen("uv://127.0.0.1:0");
      const [client, server] = await Promise.all([context.connect(listener.addresses()[0]!), listener.accept()]);
      const sent = client.write({ tensors: [{ buffer: patterned(1000, 4) }] });
      const m = await server.readMessage();
      await sent;
      expect(hasPattern(m.tensors[0]!.buffer as Uint8Array, 4)).toBe(true);
    } finally {
      await context.close();
    }
  });
});

/**
 * A NIC that moves nothing: it records what is posted and completes what
 * the test says, so that the queue pairs' bookkeeping can be checked
 * where there is no RDMA device.
 */
class ScriptedNic implements NativeNic {
  static last?: ScriptedNic;
  readonly posted: { kind: string; qp: number; ptr: bigint; wrId: number }[] = [];
  readonly destroyed: number[] = [];
  private nextQp = 1;
  constructor(
    _device: string,
    _port: number,
    _gid: number,
    readonly completionQueueSize: number,
    readonly complete: (wrIds: number[], statuses: number[]) => void,
  ) {
    ScriptedNic.last = this;
  }
  address() {
    return { port: 1, gidIndex: 0, lid: 1, gid: new Uint8Array(16), mtu: 5, maxMsgSize: 2 ** 30, linkLayer: "infiniband" };
  }
  createQueuePair() {
    const id = this.nextQp++;
    return { id, qpn: 100 + id };
  }
  connectQueuePair() {}
  destroyQueuePair(id: number) {
    this.destroyed.push(id);
  }
  registerMemory() {
    return { id: 1, lkey: 1 };
  }
  deregisterMemory() {}
  postSend(qp: number, ptr: bigint, _length: number, _lkey: number, wrId: number) {
    this.posted.push({ kind: "send", qp, ptr, wrId });
  }
  postRecv(qp: number, ptr: bigint, _length: number, _lkey: number, wrId: number) {
    this.posted.push({ kind: "recv", qp, ptr, wrId });
  }
  statusText(status: number) {
    return status === 5 ? "Work Request Flushed Error" : `status ${status}`;
  }
  close() {}
}

const scripted: NativeAddon = { probe: () => ({ reason: null, devices: [] }), IbvNic: ScriptedNic };

describe("cuda-gdr queue pairs", () => {
  it(`keep at most ${QUEUE_DEPTH} work requests posted per direction and post the rest in order`, async () => {
    const qp = new Nic(scripted, "scripted", 1, 0).createQueuePair();
    const nic = ScriptedNic.last!;
    const sends = Array.from({ length: QUEUE_DEPTH + 6 }, (_, i) => qp.send(BigInt(i), 1, 1));
    const recvs = Array.from({ length: 3 }, (_, i) => qp.recv(BigInt(1000 + i), 1, 1));
    expect(nic.posted.filter((p) => p.kind === "send")).toHaveLength(QUEUE_DEPTH);
    expect(nic.posted.filter((p) => p.kind === "recv")).toHaveLength(3);
    const first = nic.posted.filter((p) => p.kind === "send").slice(0, 4);
    nic.complete(
      first.map((p) => p.wrId),
      [0, 0, 0, 0],
    );
    await Promise.all(sends.slice(0, 4));
    await new Promise((r) => setImmediate(r));
    const posted = nic.posted.filter((p) => p.kind === "send").map((p) => Number(p.ptr));
    expect(posted).toEqual(Array.from({ length: QUEUE_DEPTH + 4 }, (_, i) => i));
    nic.complete(
      nic.posted.map((p) => p.wrId).slice(4),
      nic.posted.slice(4).map(() => 0),
    );
    await Promise.all(recvs);
    await new Promise((r) => setImmediate(r));
    nic.complete(nic.posted.map((p) => p.wrId).slice(-2), [0, 0]);
    await Promise.all(sends);
  });

  it(`keep at most ${NIC_DEPTH} work requests outstanding on a NIC, its queue pairs taking turns`, async () => {
    const nic = new Nic(scripted, "scripted", 1, 0);
    const native = ScriptedNic.last!;
    expect(native.completionQueueSize).toBeGreaterThanOrEqual(2 * NIC_DEPTH);
    const pairs = Array.from({ length: NIC_DEPTH / QUEUE_DEPTH + 2 }, () => nic.createQueuePair());
    const sends = pairs.map((qp) => Array.from({ length: QUEUE_DEPTH }, (_, i) => qp.send(BigInt(i), 1, 1)));
    const full = NIC_DEPTH / QUEUE_DEPTH;
    expect(native.posted).toHaveLength(NIC_DEPTH);
    expect(new Set(native.posted.map((p) => p.qp))).toEqual(new Set(pairs.slice(0, full).map((qp) => qp.id)));
    // Room made by completions goes to the pairs that waited, in order.
    native.complete(
      native.posted.slice(0, 3).map((p) => p.wrId),
      [0, 0, 0],
    );
    await Promise.all(sends[0]!.slice(0, 3));
    expect(native.posted.slice(NIC_DEPTH).map((p) => p.qp)).toEqual([pairs[full]!.id, pairs[full]!.id, pairs[full]!.id]);
    // A destroyed pair's completions may never come: its room is given back.
    const reason = new Error("gone");
    pairs[1]!.destroy(reason);
    for (const p of sends[1]!) await expect(p).rejects.toBe(reason);
    const after = native.posted.slice(NIC_DEPTH + 3);
    expect(after).toHaveLength(QUEUE_DEPTH);
    expect(after.every((p) => p.qp === pairs[full]!.id || p.qp === pairs[full + 1]!.id)).toBe(true);
    // Late completions of the destroyed pair take no one's room.
    native.complete(
      native.posted.filter((p) => p.qp === pairs[1]!.id).map((p) => p.wrId),
      new Array(QUEUE_DEPTH).fill(5),
    );
    expect(native.posted).toHaveLength(NIC_DEPTH + 3 + QUEUE_DEPTH);
    // Completing whatever is posted, as often as it takes, finishes every other send.
    for (let done = 0; done < native.posted.length; ) {
      const next = native.posted.slice(done).filter((p) => p.qp !== pairs[1]!.id);
      done = native.posted.length;
      native.complete(
        next.map((p) => p.wrId),
        next.map(() => 0),
      );
      await new Promise((r) => setImmediate(r));
    }
    await Promise.all(sends.filter((_, i) => i !== 1).flat());
    expect(native.posted).toHaveLength(pairs.length * QUEUE_DEPTH);
  });

  it("reject a failed completion with the NIC's words, and everything posted or waiting when destroyed", async () => {
    const qp = new Nic(scripted, "scripted", 1, 0).createQueuePair();
    const nic = ScriptedNic.last!;
    const failing = qp.recv(1n, 1, 1);
    nic.complete([nic.posted[0]!.wrId], [5]);
    await expect(failing).rejects.toMatchObject({ code: ErrorCode.CONNECTION_RESET, message: expect.stringContaining("Work Request Flushed Error") });
    const pending = Array.from({ length: QUEUE_DEPTH + 1 }, (_, i) => qp.send(BigInt(i), 1, 1));
    const reason = new Error("peer gone");
    qp.destroy(reason);
    for (const p of pending) await expect(p).rejects.toBe(reason);
    expect(nic.destroyed).toEqual([qp.id]);
    // Completions that come after are nobody's news.
    nic.complete(
      nic.posted.map((p) => p.wrId),
      nic.posted.map(() => 5),
    );
    await expect(qp.send(0n, 1, 1)).rejects.toBe(reason);
  });
});

describe.skipIf(!viable)("cuda-gdr over a real RDMA device", () => {
  it("moves GPU tensors between two contexts through the NIC, registering each allocation once", async () => {
    const a = new Context();
    const b = new Context();
    const cuda0 = { type: "cuda", index: 0 } as const;
    for (const c of [a, b]) registerUvTransport(c);
    registerCudaGdrChannel(a);
    const receiving = registerCudaGdrChannel(b);
    const sizes = [1, MiB + 3, 64 * MiB];
    const src = allocateCuda(64 * MiB);
    const dst = allocateCuda(64 * MiB + 256);
    try {
      const listener = await b.listen("uv://127.0.0.1:0");
      const [client, server] = await Promise.all([a.connect(listener.addresses()[0]!), listener.accept()]);
      expect(client.channelFor(cuda0, cuda0)).toBe("cuda-gdr");
      for (let i = 0; i < sizes.length; i++) {
        await copyToDevice(src, patterned(sizes[i]!, i + 1));
        const sent = client.write({ tensors: [{ buffer: cudaSlice(src, 0, sizes[i]!), targetDevice: cuda0 }] });
        const d = await server.readDescriptor();
        expect(d.tensors[0]).toMatchObject({ length: sizes[i], targetDevice: cuda0 });
        await server.read({ payloads: [], tensors: [{ buffer: cudaSlice(dst, 256, sizes[i]!) }] });
        await sent;
        const back = new Uint8Array(sizes[i]!);
        await copyToHost(back, cudaSlice(dst, 256, sizes[i]!));
        expect(hasPattern(back, i + 1)).toBe(true);
      }
      expect(receiving.isViable()).toEqual({ viable: true });
    } finally {
      await a.close();
      await b.close();
      freeCuda(src);
      freeCuda(dst);
    }
  });
});
