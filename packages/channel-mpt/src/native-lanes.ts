import { Deferred, type DetachedSocket, type TensorPipeError, closedError, fromNativeError } from "@tensorpipe/core/backend";
import type { BulkLanes } from "./lanes.js";
import type { NativeAddon, NativeLaneSet } from "./native.js";

/** Bulk lanes on their own threads (native/lane_set.cc), each operation a promise. */
export class NativeLanes implements BulkLanes {
  readonly kind = "threads";
  private readonly native: NativeLaneSet;
  private readonly ops = new Map<number, Deferred<void>>();
  private nextId = 0;
  private failure?: TensorPipeError;

  constructor(addon: NativeAddon, sockets: readonly DetachedSocket[], maxChunk: number, unsentLimit: number) {
    this.native = new addon.LaneSet(
      sockets.map((s) => s.fd),
      sockets.map((s) => s.readAhead),
      maxChunk,
      unsentLimit,
      (id, err) => {
        if (id < 0) {
          this.close(err ?? undefined);
          return;
        }
        this.ops.get(id)?.resolve();
        this.ops.delete(id);
      },
    );
  }

  send(bytes: Uint8Array): Promise<void> {
    return this.submit("send", bytes);
  }

  recv(bytes: Uint8Array): Promise<void> {
    return this.submit("recv", bytes);
  }

  private submit(kind: "send" | "recv", bytes: Uint8Array): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const id = this.nextId++;
    const op = new Deferred<void>();
    this.ops.set(id, op);
    try {
      this.native[kind](bytes, bytes.byteLength, id);
    } catch (e) {
      this.close(e as Error);
    }
    return op.promise;
  }

  close(error?: Error): void {
    if (this.failure) return;
    this.failure = error ? fromNativeError(error, "mpt lane") : closedError("mpt channel");
    this.native.close();
    for (const op of this.ops.values()) op.reject(this.failure);
    this.ops.clear();
  }
}
