/**
 * A pipe's life as one value, changed in one place:
 *
 *   open ──peer's end read on main──▶ draining ──all read, all written──▶ ended
 *     │                                  │
 *     ├──────────── an error ────────────┼──────────────────────────────▶ failed
 *     └──────────── close() ─────────────┴──────────────────────────────▶ closed
 *
 * Draining, the pipe still reads what the peer sent before its end and
 * waits for its other connections to be read to their ends, where the
 * acknowledgements of this side's writes may still be; no new write is
 * taken. ended, failed and closed are final and carry the error every
 * operation of the pipe gives from then on.
 */
import { Deferred } from "../deferred.js";
import type { TensorPipeError } from "../errors.js";

/** Where a pipe is in its life. */
export type PipeState = "open" | "draining" | "ended" | "failed" | "closed";

/** The states a pipe does not leave. */
export type FinalState = "ended" | "failed" | "closed";

/** Told of every change of state, with the error of a final one. */
const rethrow = (err: TensorPipeError): never => {
  throw err;
};

export type TransitionObserver = (from: PipeState, to: PipeState, error: TensorPipeError | undefined) => void;

/** One pipe's state. */
export class PipeLifecycle {
  private current: PipeState = "open";
  private finalError?: TensorPipeError;
  private readonly done = new Deferred<TensorPipeError>();
  /** Settles (never rejects) with the error of the final state. */
  readonly closed: Promise<TensorPipeError> = this.done.promise;

  constructor(private readonly observe: TransitionObserver) {}

  get state(): PipeState {
    return this.current;
  }

  /** The error of the final state; undefined before it. */
  get error(): TensorPipeError | undefined {
    return this.finalError;
  }

  /** Rejects with the error of the final state: at once where the pipe is over, else once it is. */
  ended(): Promise<never> {
    return this.finalError ? Promise.reject(this.finalError) : this.closed.then(rethrow);
  }

  /** Whether the pipe reached a final state. */
  get isOver(): boolean {
    return this.finalError !== undefined;
  }

  /** open -> draining: the peer's end came on the main connection. False where the pipe is past open. */
  drain(): boolean {
    if (this.current !== "open") return false;
    this.current = "draining";
    this.observe("open", "draining", undefined);
    return true;
  }

  /** To a final state with `error`. False (and nothing changes) where the pipe is over already. */
  finish(to: FinalState, error: TensorPipeError): boolean {
    if (this.finalError) return false;
    const from = this.current;
    this.current = to;
    this.finalError = error;
    this.observe(from, to, error);
    this.done.resolve(error);
    return true;
  }
}
