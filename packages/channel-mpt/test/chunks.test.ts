import { type Connection, ErrorCode } from "@tensorpipe/core/backend";
import { availableParallelism } from "node:os";
import { describe, expect, it } from "vitest";
import { CHUNK_HEADER_BYTES, ChunkClaims, MAX_HEADER_PAD, MIN_CHUNK, decodeChunkHeader, encodeChunkHeader } from "../src/chunks.js";
import { defaultUnsentLimit } from "../src/index.js";

describe("mpt chunk headers", () => {
  const header = { seq: 7, offset: 3 << 20, length: 65536 };

  it("decode what they encode, skipping the padding a sender may add", () => {
    const encoded = encodeChunkHeader(header);
    expect(encoded.byteLength).toBe(CHUNK_HEADER_BYTES);
    expect(decodeChunkHeader(encoded)).toEqual(header);
    const padded = new Uint8Array(CHUNK_HEADER_BYTES + MAX_HEADER_PAD).fill(0xee);
    padded.set(encoded);
    expect(decodeChunkHeader(padded)).toEqual(header);
  });

  it.each([CHUNK_HEADER_BYTES - 1, CHUNK_HEADER_BYTES + MAX_HEADER_PAD + 1])("reject a header of %i bytes", (n) => {
    expect(() => decodeChunkHeader(new Uint8Array(n))).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
  });

  it("reject a field beyond what a number holds exactly", () => {
    const bytes = encodeChunkHeader(header);
    new DataView(bytes.buffer).setBigUint64(8, 1n << 60n, true);
    expect(() => decodeChunkHeader(bytes)).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
  });
});

describe("mpt chunk claims", () => {
  const C = MIN_CHUNK;

  it("take chunks in any order until each byte is claimed once", () => {
    const claims = new ChunkClaims(4 * C + 10);
    for (const [offset, length] of [
      [2 * C, C],
      [0, C],
      [4 * C, 10],
      [C, C],
      [3 * C, C],
    ] as const)
      expect(claims.claim(offset, length)).toBe(true);
    expect(claims.claim(0, 1 * C)).toBe(false);
    expect(claims.claim(4 * C, 10)).toBe(false);
  });

  it.each([
    ["overlaps the start of another", [[C, 2 * C]], [0, 2 * C]],
    ["overlaps the end of another", [[0, 2 * C]], [C, 2 * C]],
    ["lies inside another", [[0, 3 * C]], [C, C]],
    ["holds another", [[C, C]], [0, 3 * C]],
    ["repeats another", [[C, C]], [C, C]],
    ["is empty", [], [0, 0]],
    ["runs past the tensor", [], [4 * C, C]],
    ["is short without ending the tensor", [], [0, C - 1]],
  ] as const)("refuse a chunk that %s", (_, before, [offset, length]) => {
    const claims = new ChunkClaims(4 * C);
    for (const [o, l] of before) expect(claims.claim(o, l)).toBe(true);
    expect(claims.claim(offset, length)).toBe(false);
  });
});

describe("mpt lanes' unsent-bytes limit", () => {
  const lanes = (n: number, local: string, remote: string) => Array.from({ length: n }, () => ({ localAddress: local, remoteAddress: remote }) as Connection);
  const more = availableParallelism() + 1;

  it("is short over loopback when the lanes outnumber the cores", () => {
    expect(defaultUnsentLimit(lanes(more, "127.0.0.1:4000", "127.0.0.1:5000"))).toBe(64 * 1024);
    expect(defaultUnsentLimit(lanes(more, "[::1]:4000", "[::1]:5000"))).toBe(64 * 1024);
    expect(defaultUnsentLimit(lanes(more, "10.1.2.3:4000", "10.1.2.3:5000"))).toBe(64 * 1024);
  });

  it("is the kernel's across a network or with a core per lane", () => {
    expect(defaultUnsentLimit(lanes(more, "10.1.2.3:4000", "10.1.2.4:5000"))).toBe(0);
    expect(defaultUnsentLimit(lanes(more, "[fe80::1%eth0]:4000", "[fe80::2%eth0]:5000"))).toBe(0);
    expect(defaultUnsentLimit(lanes(availableParallelism(), "127.0.0.1:4000", "127.0.0.1:5000"))).toBe(0);
  });
});
