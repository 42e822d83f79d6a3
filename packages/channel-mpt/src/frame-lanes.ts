import { type Connection, Deferred, ErrorCode, TensorPipeError, closedError, fromNativeError, protocolError } from "@tensorpipe/core/backend";
import type { BulkLanes } from "./lanes.js";
import { CHUNK_HEADER_BYTES, ChunkClaims, MAX_HEADER_PAD, MAX_SEQ_AHEAD, chunkSize, decodeChunkHeader, encodeChunkHeader } from "./chunks.js";

interface SendOp {
  seq: number;
  bytes: Uint8Array;
  chunk: number;
  handedOut: number;
  moved: number;
  done: Deferred<void>;
}

interface RecvOp {
  bytes: Uint8Array;
  claimed: ChunkClaims;
  moved: number;
  done: Deferred<void>;
}

/**
 * Bulk lanes through the transport, in the event loop: for transports
 * with no socket to hand over (shared memory), or without the addon. A
 * lane that comes free takes the next chunk; every lane reads chunk
 * headers as they come and each chunk lands in place in the user's memory.
 */
export class FrameLanes implements BulkLanes {
  readonly kind = "event loop";
  private readonly idle: Connection[];
  private readonly sends: SendOp[] = [];
  private readonly inFlight = new Set<SendOp>();
  private readonly recvs = new Map<number, RecvOp>();
  /** Lanes holding a chunk of a tensor whose receive is not posted yet. */
  private readonly waiting = new Map<number, (() => void)[]>();
  private sendSeq = 0;
  private recvSeq = 0;
  /** Lanes the peer closed between chunks. */
  private lanesEnded = 0;
  private failure?: TensorPipeError;

  constructor(
    private readonly lanes: readonly Connection[],
    private readonly maxChunk: number,
  ) {
    this.idle = [...lanes];
    for (const lane of lanes) this.receiveOn(lane).catch((e: Error) => this.close(e));
  }

  send(bytes: Uint8Array): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const seq = this.sendSeq++;
    if (bytes.byteLength === 0) return Promise.resolve();
    const op: SendOp = {
      seq,
      bytes,
      chunk: chunkSize(bytes.byteLength, this.lanes.length, this.maxChunk),
      handedOut: 0,
      moved: 0,
      done: new Deferred<void>(),
    };
    this.sends.push(op);
    this.inFlight.add(op);
    this.pump();
    return op.done.promise;
  }

  private pump(): void {
    while (this.idle.length > 0 && this.sends.length > 0 && !this.failure) {
      const op = this.sends[0]!;
      const lane = this.idle.pop()!;
      const offset = op.handedOut;
      const length = Math.min(op.chunk, op.bytes.byteLength - offset);
      op.handedOut += length;
      if (op.handedOut === op.bytes.byteLength) this.sends.shift();
      lane.write([encodeChunkHeader({ seq: op.seq, offset, length }), op.bytes.subarray(offset, offset + length)]).then(
        () => {
          op.moved += length;
          if (op.moved === op.bytes.byteLength) {
            this.inFlight.delete(op);
            op.done.resolve();
          }
          this.idle.push(lane);
          this.pump();
        },
        (e: Error) => this.close(e),
      );
    }
  }

  recv(bytes: Uint8Array): Promise<void> {
    if (this.failure) return Promise.reject(this.failure);
    const seq = this.recvSeq++;
    if (bytes.byteLength === 0) return Promise.resolve();
    const op: RecvOp = { bytes, claimed: new ChunkClaims(bytes.byteLength), moved: 0, done: new Deferred<void>() };
    this.recvs.set(seq, op);
    for (const wake of this.waiting.get(seq) ?? []) wake();
    this.waiting.delete(seq);
    return op.done.promise;
  }

  private async receiveOn(lane: Connection): Promise<void> {
    for (;;) {
      let header: Uint8Array;
      try {
        header = await lane.read(CHUNK_HEADER_BYTES + MAX_HEADER_PAD);
      } catch (e) {
        // A peer that is done closes every lane after its last chunk, and
        // another lane may still hold chunks of a tensor: only once all
        // have ended can nothing more arrive.
        const ended = e instanceof TensorPipeError && e.code === ErrorCode.PEER_CLOSED;
        if (ended && ++this.lanesEnded < this.lanes.length) return;
        throw e;
      }
      const { seq, offset, length } = decodeChunkHeader(header);
      if (seq >= this.recvSeq + MAX_SEQ_AHEAD) throw protocolError(`mpt chunk for tensor #${seq}, far beyond any receive posted`);
      // A chunk may come before its tensor's receive is posted: this lane
      // waits (and the transport holds the sender back) until it is.
      if (seq >= this.recvSeq) await new Promise<void>((wake) => this.waiting.set(seq, [...(this.waiting.get(seq) ?? []), wake]));
      if (this.failure) return;
      const op = this.recvs.get(seq);
      if (!op?.claimed.claim(offset, length)) {
        throw protocolError(
          `mpt chunk [${offset}, +${length}) for tensor #${seq} does not fit any pending receive (it overlaps another chunk, runs past the tensor, or is under 256 KiB without ending it)`,
        );
      }
      await lane.readInto(op.bytes.subarray(offset, offset + length));
      op.moved += length;
      if (op.moved === op.bytes.byteLength) {
        this.recvs.delete(seq);
        op.done.resolve();
      }
    }
  }

  close(error?: Error): void {
    if (this.failure) return;
    this.failure = error ? fromNativeError(error, "mpt lane") : closedError("mpt channel");
    for (const lane of this.lanes) lane.close(this.failure);
    for (const op of this.inFlight) op.done.reject(this.failure);
    for (const op of this.recvs.values()) op.done.reject(this.failure);
    for (const wakers of this.waiting.values()) for (const wake of wakers) wake();
    this.inFlight.clear();
    this.sends.length = 0;
    this.recvs.clear();
    this.waiting.clear();
  }
}
