/**
 * The other process of the GPU benchmark (bench-cuda.ts): listens with uv
 * twice, once with the CUDA channels over their defaults and basic, once
 * with cuda-basic staged over cma and cma itself (where cma can work),
 * prints both URLs as one JSON line, and reads every message's tensor into
 * one reused allocation, on GPU 0 or for a CPU tensor in host memory,
 * answering each with an empty "ack" message, until stdin closes. A
 * message whose metadata is "check:<byte>" is answered "ok" when the first
 * and last KiB of its tensor hold that byte, else "bad".
 */
import { type Pipe, type TensorBuffer, cudaBuffer } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { CmaChannelContext, registerCmaChannel } from "@tensorpipe/channel-cma";
import { registerCudaBasicChannel } from "@tensorpipe/channel-cuda-basic";
import { registerCudaIpcChannel } from "@tensorpipe/channel-cuda-ipc";
import { allocateCuda, copyToHost, cudaSlice } from "@tensorpipe/cuda";
import { Context, type Listener } from "@tensorpipe/core";
import { registerUvTransport } from "@tensorpipe/transport-uv";

const capacity = Number(process.argv[2] ?? 256 << 20);
const target = allocateCuda(capacity);
const host = new Uint8Array(capacity);

const defaults = new Context();
registerUvTransport(defaults);
registerBasicChannel(defaults);
registerCudaBasicChannel(defaults);
registerCudaIpcChannel(defaults);

const cma = new CmaChannelContext();
const overCma = cma.isViable().viable ? new Context() : undefined;
if (overCma) {
  registerUvTransport(overCma);
  registerCudaBasicChannel(overCma, { cpuChannel: cma });
  registerCmaChannel(overCma);
}

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
    const buffers = d.tensors.map((t): TensorBuffer =>
      t.targetDevice?.type === "cpu" ? host.subarray(0, t.length) : cudaBuffer(target.ptr, t.length, { device: target.device.index }),
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

async function serve(context: Context): Promise<Listener> {
  const listener = await context.listen("uv://127.0.0.1:0");
  void (async () => {
    for await (const pipe of listener) sink(pipe).catch(() => pipe.close());
  })();
  return listener;
}

const url = (await serve(defaults)).addresses()[0];
const cmaUrl = overCma ? (await serve(overCma)).addresses()[0] : null;
console.log(JSON.stringify({ url, cmaUrl }));
process.stdin.resume();
process.stdin.on("end", () => void Promise.all([defaults.close(), overCma?.close()]).then(() => process.exit(0)));
