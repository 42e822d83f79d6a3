/**
 * One reader's queue of membership changes (Member.changes()): bounded,
 * so that a reader that stopped reading cannot hold the process's memory;
 * past the bound its loop throws, naming the bound.
 */
import { ErrorCode, TensorPipeError } from "@tensorpipe/core";
import type { MembershipChange } from "./membership.js";

/** Changes one reader may have waiting before its loop fails. */
export const MAX_QUEUED_CHANGES = 65_536;

export class ChangeStream implements AsyncIterableIterator<MembershipChange> {
  private readonly queue: MembershipChange[] = [];
  private head = 0;
  private waiter: ((r: IteratorResult<MembershipChange>) => void) | undefined;
  private failWaiter: ((e: Error) => void) | undefined;
  private ended = false;
  private error: Error | undefined;

  constructor(private readonly detach: (s: ChangeStream) => void) {}

  push(c: MembershipChange): void {
    if (this.ended) return;
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = this.failWaiter = undefined;
      w({ value: c, done: false });
      return;
    }
    if (this.queue.length - this.head >= MAX_QUEUED_CHANGES) {
      this.fail(
        new TensorPipeError(ErrorCode.SYSTEM, `this reader of changes() fell ${MAX_QUEUED_CHANGES} changes behind; read members() and call changes() again`),
      );
      return;
    }
    this.queue.push(c);
  }

  /** Ends the loop: cleanly, or with `error` at the next read. */
  end(error?: Error): void {
    if (error) {
      this.fail(error);
      return;
    }
    if (this.ended) return;
    this.ended = true;
    this.detach(this);
    if (this.waiter) this.waiter({ value: undefined, done: true });
    this.waiter = this.failWaiter = undefined;
  }

  private fail(error: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.detach(this);
    this.queue.length = this.head = 0;
    if (this.failWaiter) this.failWaiter(error);
    else this.error = error;
    this.waiter = this.failWaiter = undefined;
  }

  next(): Promise<IteratorResult<MembershipChange>> {
    if (this.head < this.queue.length) {
      const value = this.queue[this.head++]!;
      if (this.head > 1024 && this.head * 2 > this.queue.length) {
        this.queue.splice(0, this.head);
        this.head = 0;
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.error) {
      const e = this.error;
      this.error = undefined;
      return Promise.reject(e);
    }
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    return new Promise((resolve, reject) => {
      this.waiter = resolve;
      this.failWaiter = reject;
    });
  }

  return(): Promise<IteratorResult<MembershipChange>> {
    this.end();
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}
