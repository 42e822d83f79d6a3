/**
 * The mpt wire format on a bulk lane: each chunk of a tensor is two frames
 * of the transport, a 24-byte header (the tensor's sequence number among
 * the bulk tensors sent this way, the chunk's offset and length, each a
 * little-endian u64) with up to 63 bytes of padding after it, and then the
 * chunk's bytes. Senders cut tensors as they like and lanes take chunks as
 * they come free; the receiver places each chunk by its header and skips
 * the padding, which native/lane_set.cc adds so that the chunk's bytes
 * line up with the sender's memory.
 */
import { protocolError } from "@tensorpipe/core/backend";

/** Bytes of a chunk header, before its padding. */
export const CHUNK_HEADER_BYTES = 24;
/** The most padding a chunk header frame may carry after its 24 bytes. */
export const MAX_HEADER_PAD = 63;
/** Chunks are never smaller: a header and a wake-up per chunk. */
export const MIN_CHUNK = 256 * 1024;
/** A chunk for a tensor this far beyond the receives posted is the peer's error. */
export const MAX_SEQ_AHEAD = 1 << 20;

/** Where a chunk belongs. */
export interface ChunkHeader {
  /** The tensor's sequence number among the bulk tensors. */
  seq: number;
  /** The chunk's offset in the tensor. */
  offset: number;
  /** The chunk's length. */
  length: number;
}

/** A chunk header's 24 bytes. */
export function encodeChunkHeader(h: ChunkHeader): Uint8Array {
  const out = new Uint8Array(CHUNK_HEADER_BYTES);
  const view = new DataView(out.buffer);
  view.setBigUint64(0, BigInt(h.seq), true);
  view.setBigUint64(8, BigInt(h.offset), true);
  view.setBigUint64(16, BigInt(h.length), true);
  return out;
}

/** Decodes a chunk header; ERR_TP_PROTOCOL on bad bytes. */
export function decodeChunkHeader(bytes: Uint8Array): ChunkHeader {
  if (bytes.byteLength < CHUNK_HEADER_BYTES || bytes.byteLength > CHUNK_HEADER_BYTES + MAX_HEADER_PAD) {
    throw protocolError(`mpt chunk header of ${bytes.byteLength} bytes, not ${CHUNK_HEADER_BYTES} to ${CHUNK_HEADER_BYTES + MAX_HEADER_PAD}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const get = (at: number) => {
    const v = view.getBigUint64(at, true);
    if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw protocolError(`mpt chunk header field of ${v}`);
    return Number(v);
  };
  return { seq: get(0), offset: get(8), length: get(16) };
}

/** About two chunks per lane, so that a lane that finishes early takes more. */
export function chunkSize(length: number, lanes: number, maxChunk: number): number {
  const even = Math.ceil((Math.floor(length / (2 * lanes)) + 1) / 65536) * 65536;
  return Math.min(Math.max(maxChunk, MIN_CHUNK), Math.max(MIN_CHUNK, even));
}

/**
 * The parts of one tensor that chunks have claimed on the receiving side.
 * A chunk that overlaps another, is empty, runs past the tensor or is
 * shorter than a sender cuts one (MIN_CHUNK) without ending the tensor is
 * refused: chunks that never overlap count each byte once, so a receive is
 * complete only once every byte has landed and no lane still writes into
 * it once it is delivered. Adjacent claims merge, and with MIN_CHUNK a
 * peer cannot make the list long.
 */
export class ChunkClaims {
  /** Claimed parts in order, as [start, end) pairs. */
  private readonly parts: [number, number][] = [];

  constructor(private readonly length: number) {}

  /** Reserves [offset, offset + length); false where the chunk is refused. */
  claim(offset: number, length: number): boolean {
    const end = offset + length;
    if (length === 0 || end > this.length || (length < MIN_CHUNK && end !== this.length)) return false;
    // The first part that starts after `offset`.
    let lo = 0;
    for (let hi = this.parts.length; lo < hi; ) {
      const mid = (lo + hi) >>> 1;
      if (this.parts[mid]![0] <= offset) lo = mid + 1;
      else hi = mid;
    }
    const next = this.parts[lo];
    const prev = this.parts[lo - 1];
    if ((next && next[0] < end) || (prev && prev[1] > offset)) return false;
    const joinsNext = next !== undefined && next[0] === end;
    if (prev && prev[1] === offset) {
      prev[1] = joinsNext ? next[1] : end;
      if (joinsNext) this.parts.splice(lo, 1);
    } else if (joinsNext) next[0] = offset;
    else this.parts.splice(lo, 0, [offset, end]);
    return true;
  }
}
