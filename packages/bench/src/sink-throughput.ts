import { type Allocation, CPU_DEVICE, type Pipe } from "@tensorpipe/core";

const ack: Allocation = { payloads: [], tensors: [] };

/**
 * GB/s of `count` messages carrying `tensor` into the peer's reused buffers
 * (peer.js's "sink"), all in flight at once, each acknowledged.
 */
export async function sinkThroughput(pipe: Pipe, tensor: Uint8Array, count: number): Promise<number> {
  const t0 = performance.now();
  const writes = Array.from({ length: count }, () => pipe.write({ metadata: "sink", tensors: [{ buffer: tensor, targetDevice: CPU_DEVICE }] }));
  for (let i = 0; i < count; i++) {
    await pipe.readDescriptor();
    await pipe.read(ack);
  }
  await Promise.all(writes);
  return (tensor.length * count) / ((performance.now() - t0) / 1000) / 1e9;
}
