import { performance } from "node:perf_hooks";
import type { Connection } from "./transport.js";

/** How long a connection may say nothing before it may be dropped to make room (ms). */
export const SILENT_GRACE_MS = 250;
/** How long a handshake may wait on its peer, once it spoke, before it may be dropped to make room (ms). */
export const STALLED_GRACE_MS = 1000;
/**
 * Past this many graces a wait counts whatever this loop did meanwhile: a
 * peer that keeps the loop busy with one legal pipe must not switch the
 * drop off.
 */
const BUSY_GRACES = 3;
/** How often to look again at waits not yet past their grace by this loop's idle time (ms). */
const RECHECK_MS = 50;

/** Where a connection stands while the listener waits on its peer. */
interface Wait {
  /** performance.now() when the wait began. */
  at: number;
  /** This loop's idle time then (performance.eventLoopUtilization().idle). */
  idle: number;
}

/** What a dropped connection is told. */
export interface Stalled {
  connection: Connection;
  /** Whether it had sent its first frame. */
  spoke: boolean;
  /** How long it has waited (ms). */
  waited: number;
}

/**
 * The connections of a listener whose handshakes wait on their peers, in
 * two stages: silent (no first frame yet) and spoken (a handshake under way:
 * the rest of the offer, the connections the answer asked for, a proof).
 * Under pressure (past maxPendingHandshakes, or out of descriptors) the
 * listener drops those past their grace, oldest first: a peer that said a
 * few bytes and then nothing must not hold a descriptor any longer than one
 * that said nothing. A connection with bytes waiting unread has spoken, and
 * a wait counts only while this loop sat idle as well, up to three graces,
 * so that a server busy with a burst of real peers, whose bytes or
 * connections wait unread, does not take them for stalled.
 */
export class HandshakeWaits {
  private readonly silent = new Map<Connection, Wait>();
  private readonly spoken = new Map<Connection, Wait>();
  /** Spoken connections that were answered and wait on others (the connections the answer asked for). */
  private readonly answered = new Set<Connection>();

  /** Connections whose handshakes wait. */
  get size(): number {
    return this.silent.size + this.spoken.size;
  }

  /** A connection came: it has said nothing yet. */
  accepted(c: Connection): void {
    this.silent.set(c, now());
  }

  /** `c` sent its first frame: its handshake waits on the peer from now on. */
  spoke(c: Connection): void {
    if (this.silent.delete(c)) this.spoken.set(c, now());
  }

  /**
   * `c` was answered: its handshake waits on other connections now, and
   * bytes on `c` are no sign of it going on. A peer that sent a few bytes
   * past its offer (the start of a message, or junk) and never opened the
   * connections asked for had kept the drop off for the whole timeout.
   */
  answeredOn(c: Connection): void {
    if (this.spoken.has(c)) this.answered.add(c);
  }

  /** `c`'s handshake ended, one way or another. */
  done(c: Connection): void {
    this.silent.delete(c);
    this.spoken.delete(c);
    this.answered.delete(c);
  }

  /** Takes the oldest connection past its grace, if any. */
  takeOldestStalled(): Stalled | undefined {
    const t = now();
    for (const [waits, grace, spoke] of [
      [this.silent, SILENT_GRACE_MS, false],
      [this.spoken, STALLED_GRACE_MS, true],
    ] as const) {
      // Oldest first: past the first that is not stalled, none is.
      for (const [c, wait] of waits) {
        if (t.at - wait.at < grace) break;
        // Bytes that wait unread (a loop busy with a burst) are a peer that
        // spoke, but not once it was answered: they are not the handshake's.
        if (!stalled(wait, t, grace) || (!this.answered.has(c) && c.hasPendingInput?.())) continue;
        waits.delete(c);
        this.answered.delete(c);
        return { connection: c, spoke, waited: t.at - wait.at };
      }
    }
    return undefined;
  }

  /** When to look again for waits past their grace (ms), or undefined when none waits. */
  nextCheckIn(): number | undefined {
    const t = now();
    let next: number | undefined;
    for (const [waits, grace] of [
      [this.silent, SILENT_GRACE_MS],
      [this.spoken, STALLED_GRACE_MS],
    ] as const) {
      const first = waits.values().next();
      if (first.done) continue;
      const wallLeft = first.value.at + grace - t.at;
      const ms = Math.max(RECHECK_MS, wallLeft);
      next = next === undefined ? ms : Math.min(next, ms);
    }
    return next;
  }

  /** Every connection whose handshake waits. */
  *connections(): IterableIterator<Connection> {
    yield* this.silent.keys();
    yield* this.spoken.keys();
  }

  clear(): void {
    this.silent.clear();
    this.spoken.clear();
    this.answered.clear();
  }
}

function now(): Wait {
  return { at: performance.now(), idle: performance.eventLoopUtilization().idle };
}

function stalled(wait: Wait, t: Wait, grace: number): boolean {
  const waited = t.at - wait.at;
  return waited >= grace && (t.idle - wait.idle >= grace || waited >= BUSY_GRACES * grace);
}
