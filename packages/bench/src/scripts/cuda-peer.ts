/**
 * The other process of the GPU benchmark (bench-cuda.ts): listens with uv
 * and every channel the bench holds against another (cuda-ipc, cuda-basic
 * over basic and, where cma can work, also over cma; basic and cma for CPU
 * tensors), prints its URL as one JSON line with whether cma is there, and
 * reads every message's tensor into one reused allocation, on GPU 0 or for
 * a CPU tensor in host memory, answering each with an empty "ack" message,
 * until stdin closes. A message whose metadata is "check:<byte>" is
 * answered "ok" when the first and last KiB of its tensor hold that byte,
 * else "bad".
 */
import { type Pipe, type TensorBuffer, cudaBuffer } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { CmaChannelContext, registerCmaChannel } from "@tensorpipe/channel-cma";
import { registerCudaBasicChannel } from "@tensorpipe/channel-cuda-basic";
import { registerCudaIpcChannel } from "@tensorpipe/channel-cuda-ipc";
import { allocateCuda, copyToHost, cudaSlice } from "@tensorpipe/cuda";
import { Context } from "@tensorpipe/core";
import { registerUvTransport } from "@tensorpipe/transport-uv";

const capacity = Number(process.argv[2] ?? 256 << 20);
const target = allocateCuda(capacity);
const host = new Uint8Array(capacity);

const context = new Context();
registerUvTransport(context);
registerBasicChannel(context);
registerCudaIpcChannel(context);
const cma = new CmaChannelContext().isViable().viable;
registerCudaBasicChannel(context, cma ? { alsoOver: { cma: new CmaChannelContext() } } : {});
if (cma) registerCmaChannel(context);

/** The first and last KiB of the `length` bytes received into `buffer`, on the host. */
async function ends(buffer: TensorBuffer, length: number): Promise<Uint8Array[]> {
  const n = Math.min(1024, length);
  if (buffer instanceof Uint8Array) return [buffer.subarray(0, n), buffer.subarray(length - n, length)];
  const out = [new Uint8Array(n), new Uint8Array(n)];
  await copyToHost(out[0]!, cudaSlice(target, 0, n));
  await copyToHost(out[1]!, cudaSlice(target, length - n, n));
  return out;
}

async function sink(pipe: Pipe): Promise<void> {
  for (;;) {
    const d = await pipe.readDescriptor();
    const buffers = d.tensors.map(
      (t): TensorBuffer => (t.targetDevice?.type === "cpu" ? host.subarray(0, t.length) : cudaBuffer(target.ptr, t.length, { device: target.device.index })),
    );
    await pipe.read({ payloads: [], tensors: buffers.map((buffer) => ({ buffer })) });
    let answer = "ack";
    if (d.metadata.startsWith("check:")) {
      const want = Number(d.metadata.slice(6));
      const length = d.tensors[0]?.length ?? 0;
      answer = length > 0 && (await ends(buffers[0]!, length)).every((e) => e.every((b) => b === want)) ? "ok" : "bad";
    }
    void pipe.write({ metadata: answer }).catch(() => undefined);
  }
}

const listener = await context.listen("uv://127.0.0.1:0");
void (async () => {
  for await (const pipe of listener) sink(pipe).catch(() => pipe.close());
})();
console.log(JSON.stringify({ url: listener.addresses()[0], cma }));
process.stdin.resume();
process.stdin.on("end", () => void context.close().then(() => process.exit(0)));
