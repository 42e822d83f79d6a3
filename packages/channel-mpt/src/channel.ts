import { type Channel, type Connection, type TensorBuffer, closedError, cpuBytes, writeFrame } from "@tensorpipe/core/backend";
import { openBulkLanes } from "./bulk-lanes.js";
import type { BulkLanes } from "./lanes.js";

/**
 * One end of an mpt channel. The first connection carries tensors smaller
 * than `minSplit` whole, one frame each, in the event loop like basic;
 * larger ones are cut into chunks over the other connections, the bulk
 * lanes. Both ends route a tensor by its length alone, so they agree.
 */
export class MptChannel implements Channel {
  private readonly small: Connection;
  private readonly bulk?: Promise<BulkLanes>;
  private closed = false;

  constructor(
    connections: readonly Connection[],
    private readonly minSplit: number,
    maxChunk: number,
    threads: boolean,
    unsentLimit?: number,
  ) {
    this.small = connections[0]!;
    if (connections.length > 1) {
      this.bulk = openBulkLanes(connections.slice(1), maxChunk, threads, unsentLimit);
      this.bulk.then(
        (lanes) => this.closed && lanes.close(),
        (e: Error) => this.close(e),
      );
    }
  }

  /** How the bulk lanes run ("threads", "event loop"), or "none" with a single connection. */
  async lanesKind(): Promise<string> {
    return this.bulk ? (await this.bulk).kind : "none";
  }

  /** Sends the first `length` bytes of `buffer`; resolves when the buffer may be reused. */
  send(buffer: TensorBuffer, length: number): Promise<void> {
    try {
      const bytes = cpuBytes(buffer, length, "mpt");
      if (!this.bulk || length < this.minSplit) return writeFrame(this.small, bytes);
      return this.bulk.then((lanes) => lanes.send(bytes));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Receives `length` bytes into `buffer`; resolves when they have landed. */
  recv(buffer: TensorBuffer, length: number): Promise<void> {
    try {
      const bytes = cpuBytes(buffer, length, "mpt");
      if (!this.bulk || length < this.minSplit) return this.small.readInto(bytes);
      return this.bulk.then((lanes) => lanes.recv(bytes));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Ends the channel; pending sends and receives reject with `error` (or ERR_TP_CLOSED). */
  close(error?: Error): void {
    if (this.closed) return;
    this.closed = true;
    this.small.close(error ?? closedError("mpt channel"));
    this.bulk?.then(
      (lanes) => lanes.close(error),
      () => undefined,
    );
  }
}
