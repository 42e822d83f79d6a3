/**
 * memcpy as fast as this machine does it, the limit a same-machine channel
 * is held against: one buffer copied into a reused one by 1..N threads at
 * once (worker threads over shared memory, each copying its slice), the
 * best count taken. One thread alone flatters a channel that copies on
 * several (cma does).
 */
import { availableParallelism } from "node:os";
import { Worker } from "node:worker_threads";

const MiB = 1024 * 1024;

// A worker copies its slice `repeat` times each time the go word moves,
// then posts how long that took.
const COPIER = `
const { parentPort } = require("node:worker_threads");
parentPort.on("message", ({ src, dst, offset, length, repeat, go, seen }) => {
  const from = new Uint8Array(src, offset, length);
  const to = new Uint8Array(dst, offset, length);
  const word = new Int32Array(go);
  Atomics.wait(word, 0, seen);
  const t0 = performance.now();
  for (let i = 0; i < repeat; i++) to.set(from);
  parentPort.postMessage(performance.now() - t0);
});
`;

export class ParallelMemcpy {
  private readonly workers: Worker[];
  private readonly go = new Int32Array(new SharedArrayBuffer(4));
  private src = new Uint8Array(new SharedArrayBuffer(0));
  private dst = new Uint8Array(new SharedArrayBuffer(0));

  /** Copies of at least this size are split over threads; smaller ones run on this thread. */
  static readonly SPLIT_FROM = MiB;
  /** The most threads tried unless told otherwise. */
  static readonly MAX_THREADS = Math.min(8, availableParallelism());

  constructor(readonly maxThreads = ParallelMemcpy.MAX_THREADS) {
    this.workers = Array.from({ length: maxThreads }, () => new Worker(COPIER, { eval: true }));
  }

  /** GB/s of the best thread count for `data.length` bytes. */
  async throughput(data: Uint8Array, count: number): Promise<number> {
    const bytes = data.length;
    const n = Math.max(count, Math.ceil((64 * MiB) / bytes));
    if (bytes < ParallelMemcpy.SPLIT_FROM) return this.onThisThread(data, n);
    this.load(data);
    let best = 0;
    for (let threads = 1; threads <= this.maxThreads; threads++) {
      best = Math.max(best, await this.split(bytes, threads, n));
    }
    return best;
  }

  /** GB/s of `data.length` bytes split over `threads` threads (at most maxThreads), whatever the size. */
  async throughputOn(threads: number, data: Uint8Array, count: number): Promise<number> {
    if (!(Number.isInteger(threads) && threads >= 1 && threads <= this.maxThreads))
      throw new Error(`threads must be from 1 to ${this.maxThreads}, got ${threads}`);
    this.load(data);
    return this.split(data.length, threads, Math.max(count, Math.ceil((64 * MiB) / data.length)));
  }

  /** `data` into the shared source, which grows (with the destination) to hold it. */
  private load(data: Uint8Array): void {
    if (this.src.length < data.length) {
      this.src = new Uint8Array(new SharedArrayBuffer(data.length));
      this.dst = new Uint8Array(new SharedArrayBuffer(data.length));
    }
    this.src.set(data);
  }

  /** Where the last copy landed: its first bytes equal the last data given. */
  destination(): Uint8Array {
    return this.dst;
  }

  private onThisThread(data: Uint8Array, n: number): number {
    if (this.dst.length < data.length) this.dst = new Uint8Array(new SharedArrayBuffer(data.length));
    const target = this.dst.subarray(0, data.length);
    target.set(data);
    const t0 = performance.now();
    for (let i = 0; i < n; i++) target.set(data);
    return (data.length * n) / ((performance.now() - t0) / 1000) / 1e9;
  }

  /** Every thread copies its slice n times, started together; the slowest sets the time. */
  private async split(bytes: number, threads: number, n: number): Promise<number> {
    // Slices on 4 KiB boundaries, as a kernel or a copy engine would cut them.
    const step = Math.ceil(bytes / threads / 4096) * 4096;
    const seen = Atomics.load(this.go, 0);
    const done: Promise<number>[] = [];
    for (let i = 0; i < threads && i * step < bytes; i++) {
      const offset = i * step;
      const w = this.workers[i]!;
      done.push(new Promise((resolve) => w.once("message", resolve)));
      w.postMessage({
        src: this.src.buffer,
        dst: this.dst.buffer,
        offset,
        length: Math.min(step, bytes - offset),
        repeat: n,
        go: this.go.buffer,
        seen,
      });
    }
    // Let every worker reach its wait, then start them at once.
    await new Promise((r) => setTimeout(r, 20));
    Atomics.add(this.go, 0, 1);
    Atomics.notify(this.go, 0);
    const ms = Math.max(...(await Promise.all(done)));
    return (bytes * n) / (ms / 1000) / 1e9;
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((w) => w.terminate()));
  }
}
