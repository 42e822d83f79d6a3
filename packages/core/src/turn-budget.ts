import { Fifo } from "./fifo.js";

/** Reads and writes that may complete at once in one turn of the event loop. */
export const AT_ONCE_PER_TURN = 256;

/** Past this many in a turn, the turn's end is watched for (one Immediate), where the count starts again. */
const WATCH_AFTER = 64;

/**
 * Reads whose bytes are already here, and writes the ring or the kernel
 * takes whole, complete at once, and the code that awaits them goes on to
 * the next: one chain of promises that never yields while a peer keeps a
 * ring full, or keeps reading as fast as this side writes. It would hold
 * this thread's event loop (its timers, its other sockets) for as long as
 * that lasts. Past AT_ONCE_PER_TURN such completions, a read waits for
 * the loop's next turn (setImmediate), and a write done is told then; each
 * in the order asked for. The count starts again only where the loop has
 * turned (an Immediate, armed once WATCH_AFTER are counted): not at each
 * connection's wake-up, or a peer with many pipes woken in one turn would
 * get the count many times over. A quiet turn arms nothing, so the hot
 * path allocates nothing per turn.
 */
class TurnBudget {
  private used = 0;
  /** setImmediate(nextTurn) is pending. */
  private armed = false;
  private readonly waiting = new Fifo<() => void>();

  /** Whether the count is spent: the next operation must wait (later()). */
  get spent(): boolean {
    return this.used >= AT_ONCE_PER_TURN;
  }

  /** Counts an operation that completed at once. */
  spend(): void {
    if (++this.used >= WATCH_AFTER) this.watchTurnEnd();
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
    while (!this.spent && this.waiting.length > 0) this.waiting.shift()!();
    if (this.waiting.length > 0) this.watchTurnEnd();
  };
}

/** This thread's budget, shared by every connection. */
export const turnBudget = new TurnBudget();
