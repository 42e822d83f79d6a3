/** The value below which `p` percent of `sorted` (ascending) lie: the nearest rank. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

/** The median of `values`, in any order. */
export function median(values: readonly number[]): number {
  return percentile(
    [...values].sort((a, b) => a - b),
    50,
  );
}

/**
 * How `a` compares with `b` where both were measured turn by turn in one
 * run (the same index is the same turn): the median of their ratios turn by
 * turn. What the machine gives drifts from turn to turn (1 MiB streams over
 * shm ran at 9 to 35 GB/s within a minute), and a ratio of two medians
 * carries that drift where a ratio within each turn does not.
 */
export function pairedRatio(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  if (n === 0) return NaN;
  return median(Array.from({ length: n }, (_, i) => a[i]! / b[i]!));
}

/** Round-trip percentiles, in microseconds. */
export interface LatencySummary {
  /** The median. */
  p50: number;
  /** The 99th percentile. */
  p99: number;
}

/** p50 and p99 of round trips in microseconds. */
export function summarize(samplesUs: number[]): LatencySummary {
  const sorted = [...samplesUs].sort((a, b) => a - b);
  return { p50: percentile(sorted, 50), p99: percentile(sorted, 99) };
}

/** A number with `digits` decimals, or "n/a". */
export const fmt = (n: number, digits = 1) => (Number.isFinite(n) ? n.toFixed(digits) : "n/a");
