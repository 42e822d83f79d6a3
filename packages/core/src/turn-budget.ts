import { Fifo } from "./fifo.js";

/** How long reads and writes may go on completing at once in one turn of the event loop, in ms. */
export const TURN_MS = 1;

/**
 * The clock is read once in this many operations, the first time when the
 * turn's end starts being watched for (one Immediate), where the count
 * starts again.
 */
export const CHECK_EVERY = 64;

/**
 * Reads whose bytes are already here, and writes the ring or the kernel
 * takes whole, complete at once, and the code that awaits them goes on to
 * the next: one chain of promises that never yields while a peer keeps a
 * ring full, or keeps reading as fast as this side writes. It would hold
 * this thread's event loop (its timers, its other sockets) for as long as
 * that lasts. Once such completions have gone on for TURN_MS, a read
 * waits for the loop's next turn (setImmediate), and a write done is told
 * then; each in the order asked for. A budget of time, not of operations:
 * a count small enough to keep the loop turning under 8 B floods (256)
 * made a front's 16 KiB requests wait a turn at its ordinary rate and
 * doubled their p50. The count starts again only where the loop has
 * turned (an Immediate, armed once CHECK_EVERY are counted): not at each
 * connection's wake-up, or a peer with many pipes woken in one turn would
 * get the budget many times over. A quiet turn arms nothing and reads no
 * clock, so the hot path allocates nothing per turn.
 */
class TurnBudget {
  private used = 0;
  /** When the clock was first read this turn (at the CHECK_EVERY-th operation). */
  private watchedSince = 0;
  private over = false;
  /** setImmediate(nextTurn) is pending. */
  private armed = false;
  private readonly waiting = new Fifo<() => void>();

  /** Whether TURN_MS have passed this turn: the next operation must wait (later()). */
  get spent(): boolean {
    return this.over;
  }

  /**
   * Counts an operation that completed at once. The clock is read and
   * compared on every check alike: code only long turns ran (never a
   * warm-up's) would have no type feedback, and V8 throws away the
   * optimized code of spend()'s callers the first time it runs.
   */
  spend(): void {
    if (++this.used % CHECK_EVERY !== 0) return;
    const now = performance.now();
    if (this.used === CHECK_EVERY) {
      this.watchedSince = now;
      this.watchTurnEnd();
    }
    this.over = now - this.watchedSince >= TURN_MS;
  }

  /** Runs `job` in a later turn, after the jobs given before it. */
  later(job: () => void): void {
    this.waiting.push(job);
    this.watchTurnEnd();
  }

  private watchTurnEnd(): void {
    if (this.armed) return;
    this.armed = true;
    setImmediate(this.nextTurn);
  }

  private readonly nextTurn = (): void => {
    this.armed = false;
    this.used = 0;
    this.over = false;
    while (!this.spent && this.waiting.length > 0) this.waiting.shift()!();
    if (this.waiting.length > 0) this.watchTurnEnd();
  };
}

/** This thread's budget, shared by every connection. */
export const turnBudget = new TurnBudget();
