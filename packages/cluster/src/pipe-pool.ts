/**
 * The pipes a member dialled, one per peer name: dialled on first use and
 * reused; callers that ask at once share one dial; a pipe that ended is
 * dropped, and the next call dials again (its own operations have already
 * rejected with the reason, so nothing fails silently).
 */
import type { OperationOptions, Pipe } from "@tensorpipe/core";
import { bounded } from "./deadline.js";

export class PipePool {
  private readonly pipes = new Map<string, Pipe>();
  private readonly dials = new Map<string, Promise<Pipe>>();

  constructor(private readonly dial: (name: string) => Promise<Pipe>) {}

  /** The open pipe to `name`, or the one being dialled, or a new dial; each caller's deadline bounds its own wait only. */
  get(name: string, options?: OperationOptions): Promise<Pipe> {
    const open = this.pipes.get(name);
    if (open && !open.isClosed) return Promise.resolve(open);
    let dial = this.dials.get(name);
    if (!dial) {
      dial = this.dial(name).then(
        (pipe) => {
          this.dials.delete(name);
          this.pipes.set(name, pipe);
          pipe.closed.then(() => {
            if (this.pipes.get(name) === pipe) this.pipes.delete(name);
          });
          return pipe;
        },
        (e) => {
          this.dials.delete(name);
          throw e;
        },
      );
      this.dials.set(name, dial);
    }
    return bounded(dial, options, `pipe("${name}")`);
  }

  /** Closes every pipe, and each dial's pipe as it completes. */
  close(): void {
    for (const p of this.pipes.values()) p.close();
    this.pipes.clear();
    for (const d of this.dials.values())
      d.then(
        (p) => p.close(),
        () => undefined,
      );
    this.dials.clear();
  }
}
