import type { Channel, CudaBuffer, TensorBuffer } from "@tensorpipe/core/backend";
import { copyToDevice, copyToHost, cudaSlice, cudaTensor } from "@tensorpipe/cuda";
import type { PinnedPool } from "./pinned-pool.js";

/**
 * One end of a cuda-basic channel: a GPU tensor goes device -> pinned host
 * chunk -> CPU channel -> pinned host chunk -> device, chunk by chunk, so
 * that the copies off and onto the GPU overlap the transfer. Copies run on
 * the buffer's stream (else the legacy default stream, which waits for the
 * work already queued on the GPU). Tensors go one after another, in the
 * order issued, as the CPU channel needs.
 */
export class CudaBasicChannel implements Channel {
  private sendQueue: Promise<void> = Promise.resolve();
  private recvQueue: Promise<void> = Promise.resolve();

  constructor(
    private readonly cpu: Channel,
    private readonly sendPool: PinnedPool,
    private readonly recvPool: PinnedPool,
  ) {}

  /** Sends the first `length` bytes of `buffer`; resolves when the buffer may be reused. */
  send(buffer: TensorBuffer, length: number): Promise<void> {
    return this.enqueue("sendQueue", () => this.sendOne(cudaTensor(buffer, length, "cuda-basic"), length));
  }

  /** Receives `length` bytes into `buffer`; resolves when they have landed. */
  recv(buffer: TensorBuffer, length: number): Promise<void> {
    return this.enqueue("recvQueue", () => this.recvOne(cudaTensor(buffer, length, "cuda-basic"), length));
  }

  private enqueue(queue: "sendQueue" | "recvQueue", op: () => Promise<void>): Promise<void> {
    const done = this[queue].then(op);
    this[queue] = done.catch(() => undefined);
    return done;
  }

  private async sendOne(tensor: CudaBuffer, length: number): Promise<void> {
    const chunk = this.sendPool.chunkBytes;
    const sent: Promise<void>[] = [];
    // Resolves once the chunk before has been handed to the CPU channel.
    let handed: Promise<unknown> = Promise.resolve();
    let failed = false;
    for (let offset = 0; offset < length && !failed; offset += chunk) {
      const n = Math.min(chunk, length - offset);
      const staging = await this.sendPool.take();
      const copied = copyToHost(staging.subarray(0, n), cudaSlice(tensor, offset, n));
      // The CPU channel takes chunks in order, each once its copy is done,
      // and carries as many at once as the pool holds: a chunk does not wait
      // for the one before to reach the peer.
      const ready = Promise.all([handed, copied]);
      const chunkSent = ready.then(() => this.cpu.send(staging, n)).finally(() => this.sendPool.give(staging));
      // Seen at once (the loop may be waiting for a chunk meanwhile): no more are copied after a failure.
      chunkSent.catch(() => (failed = true));
      sent.push(chunkSent);
      handed = ready;
    }
    await Promise.all(sent);
  }

  private async recvOne(tensor: CudaBuffer, length: number): Promise<void> {
    const chunk = this.recvPool.chunkBytes;
    const landed: Promise<void>[] = [];
    for (let offset = 0; offset < length; offset += chunk) {
      const n = Math.min(chunk, length - offset);
      const staging = await this.recvPool.take();
      const target = cudaSlice(tensor, offset, n);
      landed.push(
        this.cpu
          .recv(staging, n)
          .then(() => copyToDevice(target, staging.subarray(0, n)))
          .finally(() => this.recvPool.give(staging)),
      );
    }
    await Promise.all(landed);
  }

  /** Ends the channel; pending sends and receives reject with `error` (or ERR_TP_CLOSED). */
  close(error?: Error): void {
    this.cpu.close(error);
  }
}
