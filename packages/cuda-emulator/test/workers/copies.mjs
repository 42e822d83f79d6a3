// A worker that keeps the CUDA helper busy on the default stream: copies
// from pageable memory (queued from the thread pool, in turn), from pinned
// memory (on the stream at once) and fills, until it is terminated.
import { parentPort } from "node:worker_threads";
import { allocateCuda, copyToDevice, copyToHost, fillDevice, pinnedHostBuffer } from "@tensorpipe/cuda";

const bytes = 1 << 20;
const device = allocateCuda(bytes);
const pageable = new Uint8Array(bytes);
const pinned = pinnedHostBuffer(bytes);
parentPort.postMessage("busy");
for (;;) {
  await Promise.all([
    copyToDevice(device, pageable),
    fillDevice(device, 7),
    copyToHost(pinned, device),
    copyToHost(pageable, device),
    copyToDevice(device, pinned),
  ]);
}
