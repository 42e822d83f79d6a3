/**
 * The suites' patterns: a MiB at a time (patternChunks, hasPattern,
 * matches) they are the bytes patterned() makes whole.
 */
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { matches } from "../src/testing/conformance-side.js";
import { hasPattern, patternChunks, patterned } from "../src/testing/patterns.js";

const MiB = 1 << 20;

describe("patterns made a MiB at a time", () => {
  it.each([0, 1, 3, 4, 7, MiB - 1, MiB, MiB + 3, 3 * MiB + 6])("are patterned()'s bytes, %i of them", (length) => {
    for (const seed of [0, 9, 70_000]) {
      const whole = patterned(length, seed);
      const joined = Buffer.concat(Array.from(patternChunks(length, seed), (c) => Buffer.from(c)));
      expect(joined.equals(whole)).toBe(true);
      expect(hasPattern(whole, seed)).toBe(true);
      expect(matches({ length, sha256: createHash("sha256").update(whole).digest("hex") }, seed)).toBe(true);
    }
  });

  it("find one byte changed in any chunk, and another seed", () => {
    const bytes = patterned(2 * MiB + 5, 4);
    expect(hasPattern(bytes, 5)).toBe(false);
    for (const at of [0, MiB - 1, MiB, 2 * MiB + 4]) {
      bytes[at]! ^= 1;
      expect(hasPattern(bytes, 4)).toBe(false);
      bytes[at]! ^= 1;
    }
    expect(hasPattern(bytes, 4)).toBe(true);
  });
});
