const GOLDEN = 0x9e3779b9;

/** Words `first`.. of the aligned pattern, as fillPattern() writes them, into `u32`. */
function fillWords(u32: Uint32Array, seed: number, first: number): void {
  let x = (seed * 2654435761 + Math.imul(first, GOLDEN)) >>> 0;
  for (let i = 0; i < u32.length; i++) {
    x = (x + GOLDEN) >>> 0;
    u32[i] = x ^ (first + i);
  }
}

/** Fills `bytes` with a pattern that differs by seed and position. */
export function fillPattern(bytes: Uint8Array, seed: number): Uint8Array {
  const words = Math.floor(bytes.byteLength / 4);
  if (bytes.byteOffset % 4 === 0 && words > 0) fillWords(new Uint32Array(bytes.buffer, bytes.byteOffset, words), seed, 0);
  for (let i = words * 4; i < bytes.byteLength; i++) bytes[i] = (seed + i * 31) & 0xff;
  if (words > 0 && bytes.byteOffset % 4 !== 0) {
    for (let i = 0; i < words * 4; i++) bytes[i] = (seed * 7 + i * 13) & 0xff;
  }
  return bytes;
}

export function patterned(length: number, seed: number): Uint8Array {
  return fillPattern(new Uint8Array(length), seed);
}

const CHUNK = 1 << 20;

/**
 * patterned(length, seed), a MiB at a time in one reused buffer: checking
 * a 256 MiB tensor against its pattern then touches no 256 MiB of fresh
 * memory, which costs a second on a VM that is slow to fault pages in.
 */
export function* patternChunks(length: number, seed: number): Generator<Uint8Array> {
  const words = Math.floor(length / 4);
  const buffer = new Uint8Array(Math.min(length, CHUNK));
  for (let at = 0; at < length; at += CHUNK) {
    const chunk = buffer.subarray(0, Math.min(CHUNK, length - at));
    const first = at / 4;
    const whole = Math.max(0, Math.min(chunk.byteLength >> 2, words - first));
    fillWords(new Uint32Array(buffer.buffer, 0, whole), seed, first);
    for (let i = Math.max(at, words * 4); i < at + chunk.byteLength; i++) chunk[i - at] = (seed + i * 31) & 0xff;
    yield chunk;
  }
}

/** True when `bytes` holds exactly what patterned(bytes.length, seed) holds. */
export function hasPattern(bytes: Uint8Array, seed: number): boolean {
  const received = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let at = 0;
  for (const chunk of patternChunks(bytes.byteLength, seed)) {
    if (!received.subarray(at, at + chunk.byteLength).equals(chunk)) return false;
    at += chunk.byteLength;
  }
  return true;
}

/** A small deterministic PRNG for reproducible random sizes. */
export function prng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 0x100000000;
  };
}
