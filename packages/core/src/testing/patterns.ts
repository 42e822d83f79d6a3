/** Fills `bytes` with a pattern that differs by seed and position. */
export function fillPattern(bytes: Uint8Array, seed: number): Uint8Array {
  const words = Math.floor(bytes.byteLength / 4);
  if (bytes.byteOffset % 4 === 0 && words > 0) {
    const u32 = new Uint32Array(bytes.buffer, bytes.byteOffset, words);
    let x = (seed * 2654435761) >>> 0;
    for (let i = 0; i < words; i++) {
      x = (x + 0x9e3779b9) >>> 0;
      u32[i] = x ^ i;
    }
  }
  for (let i = words * 4; i < bytes.byteLength; i++) bytes[i] = (seed + i * 31) & 0xff;
  if (words > 0 && bytes.byteOffset % 4 !== 0) {
    for (let i = 0; i < words * 4; i++) bytes[i] = (seed * 7 + i * 13) & 0xff;
  }
  return bytes;
}

export function patterned(length: number, seed: number): Uint8Array {
  return fillPattern(new Uint8Array(length), seed);
}

/** True when `bytes` holds exactly what patterned(bytes.length, seed) holds. */
export function hasPattern(bytes: Uint8Array, seed: number): boolean {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).equals(patterned(bytes.byteLength, seed));
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
