const KiB = 1024;
const MiB = 1024 * KiB;
/** The sizes measured unless told: 8 B to 64 MiB. */
export const DEFAULT_SIZES = [8, 4 * KiB, 64 * KiB, MiB, 16 * MiB, 64 * MiB];

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
