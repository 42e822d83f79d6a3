/**
 * One message as it comes in, upstream's ReadOperation: a caller waits for
 * its descriptor (or the descriptor came first and waits for a caller), it
 * is offered to the caller, who gives memory for it, and its bytes land:
 *
 *   descriptor awaited ──descriptor──▶ offered ──read(allocation)──▶ reading ──landed──▶ done
 *          ▲        └────────────── the pipe fails or ends ───────────────┴──────────▶ failed
 *          └── an abort in the turn it was offered: it goes back for the next caller
 *
 * The reader recycles operations that are done, so that a pipe makes no
 * garbage for them message after message; each has its handlers bound once.
 */
import { Deferred } from "../deferred.js";
import type { Descriptor } from "../message.js";

/** Where a read stands. */
export type ReadState = "descriptor awaited" | "offered" | "reading" | "done" | "failed";

/** What a read tells its reader when its bytes have landed, or could not. */
export interface ReadOwner {
  landed(op: ReadOperation): void;
  landingFailed(op: ReadOperation, e: unknown): Promise<never>;
}

/** One message being read. */
export class ReadOperation {
  state: ReadState = "descriptor awaited";
  descriptor?: Descriptor;
  /** Taken by readMessage(), which reads it at once: offered, it is not the caller's to read() or to hold up others. */
  byMessage = false;
  private waiter?: Deferred<Descriptor>;
  /** Handlers of the landing promise, bound once for the life of the operation. */
  readonly onLanded: () => void;
  readonly onFailed: (e: unknown) => Promise<never>;

  constructor(owner: ReadOwner) {
    this.onLanded = () => owner.landed(this);
    this.onFailed = (e) => owner.landingFailed(this, e);
  }

  /** Settles with the descriptor once it is offered. */
  get offered(): Promise<Descriptor> {
    if (this.descriptor) return Promise.resolve(this.descriptor);
    this.waiter ??= new Deferred<Descriptor>();
    return this.waiter.promise;
  }

  /** descriptor awaited -> offered. */
  offer(d: Descriptor): void {
    this.state = "offered";
    this.descriptor = d;
    this.waiter?.resolve(d);
  }

  /** offered -> descriptor awaited: taken back in the turn it was offered, for the next caller. */
  takeBack(): Descriptor {
    const d = this.descriptor!;
    this.state = "descriptor awaited";
    this.descriptor = undefined;
    return d;
  }

  /** offered -> reading: memory was given, its bytes are on their way. */
  reading(): void {
    this.state = "reading";
  }

  /** reading -> done. */
  landed(): void {
    this.state = "done";
  }

  /** -> failed; a caller still waiting for the descriptor hears `err`. */
  fail(err: unknown): void {
    if (this.state === "descriptor awaited") this.waiter?.reject(err);
    this.state = "failed";
  }

  /** Ready for another message: done, nothing of the last one kept. */
  recycle(): void {
    this.state = "descriptor awaited";
    this.descriptor = undefined;
    this.waiter = undefined;
    this.byMessage = false;
  }
}
