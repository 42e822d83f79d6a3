/** What the bench measured: the figures of a run, as written to --json. */
import type { ContextStats } from "@tensorpipe/core";

/** One series at one size. */
export interface Cell {
  /** Round trip median, in microseconds. */
  p50?: number;
  /** Round trip 99th percentile, in microseconds. */
  p99?: number;
  /**
   * Streaming throughput, GB/s: the median of every turn of every round.
   * This machine has spells of about 100 ms in which one core's stores to
   * memory the other core read run 10x slower (the C ring shows them too),
   * and one such spell in one turn took a series' mean down by a third.
   */
  gbps: number;
  /** Every turn's bytes over every turn's time, spells included. */
  meanGbps: number;
  /** GB/s of each turn in the order they ran: the same index is the same turn in every series. */
  turnsGbps: number[];
}

/** One pipe or baseline over every size. */
export interface SeriesResult {
  /** "shm+cma", "memcpy", ... */
  name: string;
  /** user-code: a pipe timed through the code a user writes (README_LOOP), not a tuned loop. */
  kind: "pipe" | "baseline" | "user-code";
  /** For user-code: the pair it ran over, whose tuned series it is held against. */
  over?: string;
  /** By size in bytes. */
  cells: Record<number, Cell>;
}

/** Every figure of a run. */
export interface BenchResult {
  /** The sizes measured. */
  sizes: number[];
  /** Rounds per cell. */
  rounds: number;
  /** Every pipe and baseline. */
  series: SeriesResult[];
  /** Pairs and baselines left out, and why. */
  skipped: {
    /** The series. */
    name: string;
    /** Why it was left out. */
    reason: string;
  }[];
  /** The ratios printed (pair against baseline, targets), by name. */
  ratios: Record<string, number>;
  /** By size: the pair negotiation picks streamed head to head with the pair furthest ahead of it (none where there is no default pair). */
  headToHead: Record<number, HeadToHead>;
  /** What each pipe series' context carried over the whole run (pipe.stats() summed by context.stats()). */
  stats: Record<string, ContextStats>;
}

/**
 * The pair negotiation picks against the pair that came out furthest ahead
 * of it turn by turn, streamed again in short blocks that alternate A B B A:
 * blocks a millisecond apart share the machine's state, where a turn's
 * series lie up to 100 ms apart. Pairs that take the same path (shm+cma and
 * shm+basic below cma's inline size) came out of the turns at 0.82-0.89x
 * each other in some runs, the lowest of several noisy ratios; head to head
 * at 64 KiB, 0.92-1.10x over 40 blocks of 250 messages and 0.95-1.03x over
 * 320 of 60. Picking the pair in one measurement and timing it in another
 * keeps the noise that picked it out of the ratio.
 */
export interface HeadToHead {
  /** The pair held against; the default pair's own name where no pair came out ahead of it. */
  against: string;
  /** GB/s of each block of the default pair (empty where no pair was ahead). */
  own: number[];
  /** GB/s of each block of the pair held against, paired with `own` by index. */
  other: number[];
}
