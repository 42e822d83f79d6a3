const KiB = 1024;
const MiB = 1024 * KiB;

/** "8 B", "64 KiB", "1 MiB". */
export function sizeLabel(size: number): string {
  if (size >= MiB && size % MiB === 0) return `${size / MiB} MiB`;
  if (size >= KiB && size % KiB === 0) return `${size / KiB} KiB`;
  return `${size} B`;
}

/** "8", "64K", "1M", "1G" (binary units). */
export function parseSize(text: string): number {
  const m = /^(\d+)\s*([KMG]?)i?B?$/i.exec(text.trim());
  if (!m) throw new Error(`not a size: "${text}" (write 8, 64K, 1M)`);
  const unit = { "": 1, K: KiB, M: MiB, G: 1024 * MiB }[m[2]!.toUpperCase() as "" | "K" | "M" | "G"];
  const size = Number(m[1]) * unit;
  if (size < 1) throw new Error(`a size must be at least 1 byte: "${text}"`);
  return size;
}

/** What `tensorpipe bench` measured of one series at one size. */
export interface SizeFigures {
  /** Round trip median, in microseconds. */
  p50: number;
  /** Round trip 99th percentile, in microseconds. */
  p99: number;
  /** One-way stream, GB/s. */
  gbps: number;
}

/** p50 and p99 (nearest rank) of round trips in microseconds. */
export function summarize(samplesUs: readonly number[]): { p50: number; p99: number } {
  const sorted = [...samplesUs].sort((a, b) => a - b);
  const at = (p: number) => sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
  return { p50: at(50), p99: at(99) };
}
