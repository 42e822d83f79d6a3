import { pinnedHostBuffer } from "@tensorpipe/cuda";

/**
 * Page-locked staging chunks, allocated on first need up to `max`; a taker
 * beyond that waits for one to come back, first come first served.
 */
export class PinnedPool {
  private readonly free: Uint8Array[] = [];
  private readonly waiting: ((chunk: Uint8Array) => void)[] = [];
  private allocated = 0;

  constructor(
    /** Bytes of each staging chunk. */
    readonly chunkBytes: number,
    private readonly max: number,
    private readonly allocate: (bytes: number) => Uint8Array = pinnedHostBuffer,
  ) {}

  /** A free chunk, allocated while under the cap, else the next one given back. */
  take(): Promise<Uint8Array> {
    const chunk = this.free.pop();
    if (chunk) return Promise.resolve(chunk);
    if (this.allocated < this.max) {
      try {
        const fresh = this.allocate(this.chunkBytes);
        this.allocated++;
        return Promise.resolve(fresh);
      } catch (e) {
        return Promise.reject(e);
      }
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }

  /** Returns a chunk taken with take(). */
  give(chunk: Uint8Array): void {
    const next = this.waiting.shift();
    if (next) next(chunk);
    else this.free.push(chunk);
  }

  /** Chunks allocated so far. */
  get size(): number {
    return this.allocated;
  }
}
