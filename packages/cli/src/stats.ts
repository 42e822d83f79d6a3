/** The value below which `p` percent of `sorted` (ascending) lie: the nearest rank. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i]!;
}

/** The median of `values`, in any order. */
export function median(values: readonly number[]): number {
  return percentile([...values].sort((a, b) => a - b), 50);
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
