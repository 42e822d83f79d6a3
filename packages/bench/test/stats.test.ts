import { describe, expect, it } from "vitest";
import { median, pairedRatio } from "../src/stats.js";

describe("pairedRatio", () => {
  // Two series measured turn by turn while the machine went from slow to
  // fast: b is 10% behind a in every turn, but a's median turn fell in a
  // fast spell and b's in a slow one.
  const a = [10, 10, 30, 30, 30];
  const b = [9, 9, 27, 27, 9];

  it("compares the two series within each turn, not their medians", () => {
    expect(median(a) / median(b)).toBeCloseTo(30 / 9);
    expect(pairedRatio(a, b)).toBeCloseTo(10 / 9);
    expect(pairedRatio(b, a)).toBeCloseTo(0.9);
  });

  it("gives 1 for a series against itself and NaN with no turns", () => {
    expect(pairedRatio(a, a)).toBe(1);
    expect(pairedRatio([], [])).toBeNaN();
  });
});
