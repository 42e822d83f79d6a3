import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { type Connection, Context, ErrorCode } from "@tensorpipe/core/backend";
import { hasPattern } from "@tensorpipe/core/testing";
import { allocateCuda, copyToHost, cudaSlice, cudaViability, freeCuda } from "@tensorpipe/cuda";
import { UvTransport, registerUvTransport } from "@tensorpipe/transport-uv";
import { describe, expect, it } from "vitest";
import { CudaIpcChannelContext, registerCudaIpcChannel } from "../src/index.js";
import {
  ANSWERS_EXTENSION,
  IPC_REQUEST_BYTES,
  decodeIpcFrame,
  decodeIpcRequest,
  encodeIpcAnswer,
  encodeIpcAnswers,
  encodeIpcRequest,
} from "../src/ipc-request.js";

const viability = new CudaIpcChannelContext().isViable();
const gpu = viability.viable;
if (!gpu) console.log(`GPU tests skipped: ${viability.reason}`);
const MiB = 1024 * 1024;

describe("cuda-ipc channel anywhere", () => {
  it("encodes a request as one fixed frame and refuses others", () => {
    const r = { memHandle: new Uint8Array(64).fill(1), offset: 4096, length: 12345 };
    const bytes = encodeIpcRequest(r);
    expect(bytes.byteLength).toBe(IPC_REQUEST_BYTES);
    expect(decodeIpcRequest(bytes)).toEqual(r);
    expect(decodeIpcFrame(bytes)).toEqual({ kind: "request", request: r });
    expect(() => decodeIpcRequest(bytes.subarray(1))).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
    expect(() => decodeIpcFrame(new Uint8Array([7, ...bytes.subarray(1)]))).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
  });

  it("tells answers from requests by their first byte", () => {
    expect(decodeIpcFrame(encodeIpcAnswer())).toEqual({ kind: "answer" });
    expect(decodeIpcFrame(encodeIpcAnswer("copy failed"))).toEqual({ kind: "answer", failure: "copy failed" });
    // An answer of a request's length is still an answer.
    expect(decodeIpcFrame(encodeIpcAnswer("x".repeat(IPC_REQUEST_BYTES - 1))).kind).toBe("answer");
    expect(decodeIpcFrame(encodeIpcAnswers(300))).toEqual({ kind: "answers", count: 300 });
    expect(() => decodeIpcFrame(encodeIpcAnswers(3).subarray(0, 4))).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
  });

  it("never pairs GPUs of two machines, nor descriptors it cannot read, and never throws deciding", () => {
    const c = new CudaIpcChannelContext();
    expect(c.canCommunicateWithRemote("boot-a/00ff", "boot-b/00ff")).toBe(false);
    expect(c.canCommunicateWithRemote("nonsense", "boot-a/00ff")).toBe(false);
    expect(c.canCommunicateWithRemote("boot-a/not-a-gpu-here", "boot-a/not-a-gpu-either")).toBe(false);
  });

  it.skipIf(gpu)("is not viable without a GPU, says why, and advertises no device", () => {
    const c = new CudaIpcChannelContext();
    expect(c.isViable()).toEqual({ viable: false, reason: cudaViability().reason });
    expect(c.deviceDescriptors()).toEqual([]);
  });
});

describe.skipIf(!gpu)("cuda-ipc channel on a GPU", () => {
  it.each([
    ["more than were sent", 3, ErrorCode.PROTOCOL],
    ["none", 0, ErrorCode.PROTOCOL],
    ["as many as were sent", 2, undefined],
  ])("a peer's counted answer for %s frees that many sends, else fails the channel with ERR_TP_PROTOCOL", async (_, count, code) => {
    const transport = new UvTransport();
    const accepted: Connection[] = [];
    const listener = await transport.listen("127.0.0.1:0", (c) => accepted.push(c));
    const here = await transport.connect(listener.address());
    await expect.poll(() => accepted.length).toBe(1);
    listener.close();
    const peer = accepted[0]!;
    const context = new CudaIpcChannelContext();
    const channel = context.createChannel([here], "connect", { transportMedium: "network", peerWireExtension: ANSWERS_EXTENSION });
    const memory = allocateCuda(2 * MiB);
    try {
      const sends = [0, 1].map((i) =>
        channel.send(cudaSlice(memory, i * MiB, MiB), MiB).then(
          () => "sent",
          (e: { code: string }) => e.code,
        ),
      );
      for (let i = 0; i < 2; i++) expect(decodeIpcFrame(await peer.read(IPC_REQUEST_BYTES)).kind).toBe("request");
      await peer.write([encodeIpcAnswers(count)]);
      expect(await Promise.all(sends)).toEqual(code ? [code, code] : ["sent", "sent"]);
    } finally {
      channel.close();
      peer.close();
      freeCuda(memory);
      await transport.close();
      await context.close();
    }
  });

  it("copies GPU tensors from another process straight into this one's GPU memory", async () => {
    const context = new Context();
    registerUvTransport(context);
    registerCudaIpcChannel(context);
    const listener = await context.listen("uv://127.0.0.1:0");
    const sizes = [1, MiB + 3, 64 * MiB, 4096];
    const child = spawn(process.execPath, [fileURLToPath(new URL("./fixtures/ipc-sender.mjs", import.meta.url)), listener.addresses()[0]!, sizes.join(",")], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    // Listened for from the start: the sender may be gone before the last read settles here.
    const exited = new Promise((resolve) => child.once("exit", resolve));
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d));
    const pipe = await listener.accept();
    const cuda0 = { type: "cuda", index: 0 } as const;
    expect(pipe.channelFor(cuda0, cuda0)).toBe("cuda-ipc");
    try {
      for (let i = 0; i < sizes.length; i++) {
        const d = await pipe.readDescriptor();
        expect(d.tensors[0]).toMatchObject({ length: sizes[i], targetDevice: cuda0 });
        const target = allocateCuda(sizes[i]! + 256);
        try {
          await pipe.read({ payloads: [], tensors: [{ buffer: cudaSlice(target, 256, sizes[i]!) }] });
          const back = new Uint8Array(sizes[i]!);
          await copyToHost(back, cudaSlice(target, 256, sizes[i]!));
          expect(hasPattern(back, i + 1)).toBe(true);
        } finally {
          freeCuda(target);
        }
      }
      expect(await exited).toBe(0);
      expect(JSON.parse(out)).toEqual({ channel: "cuda-ipc" });
    } finally {
      child.kill();
      await context.close();
    }
  });
});
