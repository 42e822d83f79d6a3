/**
 * How a pipe learns that its peer has gone, and when it decides what that
 * means. The peer's end shows on the main connection first, behind the
 * messages it still carries; the acknowledgements of this side's writes
 * (cma's completions, say) come on the pipe's other connections, which
 * end on their own schedule. So the end is decided only once each write
 * of this side has finished, or every connection of the pipe has been read
 * to its end (or a grace has passed): a write whose acknowledgement the
 * peer sent before it closed then resolves. One of the other connections
 * ending while main goes on is a connection cut, which fails the pipe once
 * main has waited for the next message, with nothing come, for two checks.
 */
import { ErrorCode, TensorPipeError } from "../errors.js";
import type { Connection } from "../transport.js";

/** How long, once the peer's end is read on main, reads in flight and unfinished writes may take to finish. */
export const END_GRACE_MS = 5000;

/**
 * How often, once another of the pipe's connections has ended, the pipe
 * looks whether main has ended too.
 */
const CUT_CONNECTION_CHECK_MS = 1000;

/** What deciding the end needs of the pipe. */
export interface PeerEndHost {
  readonly peer: string;
  /** Whether the pipe is draining (its main connection ended). */
  readonly draining: boolean;
  /** Whether the pipe is over, or its end is held for the peer's word: nothing is left to decide. */
  readonly settled: boolean;
  /** Writes of this side not finished. */
  readonly writesInFlight: number;
  /** Reads whose bytes are still landing. */
  readonly readsInFlight: number;
  /** Whether a message is here that nobody has read. */
  readonly holdsMessage: boolean;
  /** Messages received so far, to tell a main connection that moves from one that waits. */
  readonly messagesReceived: number;
  /** The main connection ended with `err`: the host hands it to mainEnded() when it is ready to. */
  mainEnded(err: TensorPipeError): void;
  /** Begins draining. */
  drain(): void;
  /** The end is decided: readers past what came before it hear `err`. */
  decided(err: TensorPipeError): void;
  /** The pipe is over: "ended" with the clean end, or failed with `err`. */
  finish(err: TensorPipeError, clean: boolean): void;
  /** Fails the pipe with `e`. */
  fail(e: unknown): void;
  /** `e` as a TensorPipeError of this pipe. */
  describe(e: unknown): TensorPipeError;
}

/** One pipe's watch on its peer's end. */
export class PeerEnd {
  /** The end as read on main. */
  private cause?: TensorPipeError;
  /** What it was decided to be. */
  private decision?: TensorPipeError;
  private clean = false;
  /** The pipe's connections other than main that have not ended. */
  private othersOpen: number;
  private grace?: NodeJS.Timeout;
  private lastLook?: NodeJS.Immediate;

  constructor(
    private readonly host: PeerEndHost,
    main: Connection,
    others: readonly { what: string; connection: Connection }[],
  ) {
    this.othersOpen = others.length;
    // A connection that fails while idle: the peer is gone even if nobody
    // is reading or writing right now.
    main.closed.then((e) => e && host.mainEnded(host.describe(e)));
    for (const { what, connection } of others) {
      connection.closed.then((e) => {
        this.othersOpen--;
        if (host.draining) this.check();
        else if (e) this.cut(what, e);
      });
    }
  }

  /** The clean end, once decided so: an iterator over the pipe just ends on it. */
  get cleanEnd(): TensorPipeError | undefined {
    return this.clean ? this.decision : undefined;
  }

  /** Whether `err` is the end as decided. */
  isDecision(err: TensorPipeError): boolean {
    return err === this.decision;
  }

  /** The error a write gets once the peer's end has been read: it cannot reach the peer. */
  get refusal(): TensorPipeError | undefined {
    return this.cause && this.peerClosed(this.cause);
  }

  /** The main connection ended with `err`, between messages. */
  mainEnded(err: TensorPipeError): void {
    if (this.cause || this.host.settled) return;
    this.cause = err;
    this.host.drain();
    // Neither reads in flight nor unfinished writes wait for ever: a peer may keep a connection open after closing the pipe's own.
    this.grace = setTimeout(() => this.graceOver(), END_GRACE_MS);
    this.grace.unref();
    this.check();
  }

  /**
   * Decides the end once each write has finished or every connection has
   * ended, and ends the pipe once what came before the end has been read.
   */
  check(): void {
    const host = this.host;
    if (!this.cause || host.settled) return;
    if (!this.decision && host.writesInFlight === 0) this.decide();
    else if (!this.decision && this.othersOpen === 0 && !this.lastLook) {
      // Every connection has ended; a write whose acknowledgement came last
      // may still be settling its promises: a turn later it has.
      this.lastLook = setImmediate(() => {
        if (!this.decision && !host.settled) this.decide();
        this.check();
      });
    }
    if (this.decision && host.readsInFlight === 0 && !host.holdsMessage) {
      clearTimeout(this.grace);
      host.finish(this.decision, this.clean && host.writesInFlight === 0);
    }
  }

  /** The pipe is over: no more timers. */
  stop(): void {
    clearTimeout(this.grace);
    clearImmediate(this.lastLook);
  }

  /**
   * The peer's end while writes of this side were unfinished: what they
   * carried is lost. Said once, however it was learnt.
   */
  unfinishedWrites(cause: TensorPipeError): TensorPipeError {
    return new TensorPipeError(ErrorCode.PEER_CLOSED, `peer closed the pipe with ${this.host.writesInFlight} write(s) of this side unfinished`, {
      where: `pipe to ${this.host.peer}`,
      errnoName: cause.errnoName,
      syscall: cause.syscall,
      cause,
    });
  }

  private decide(): void {
    this.clean = this.host.writesInFlight === 0;
    this.decision = this.clean ? this.peerClosed(this.cause!) : this.unfinishedWrites(this.cause!);
    this.host.decided(this.decision);
  }

  private graceOver(): void {
    const host = this.host;
    if (host.settled) return;
    if (!this.decision) this.decide();
    if (host.readsInFlight === 0) {
      this.check();
      return;
    }
    host.fail(
      new TensorPipeError(
        ErrorCode.CONNECTION_RESET,
        `truncated message: the peer closed the pipe and the rest of the message did not come within ${END_GRACE_MS / 1000} s`,
        {
          where: `pipe to ${host.peer}`,
          cause: this.decision,
        },
      ),
    );
  }

  /** The peer's clean end, as every later operation hears of it (a write as much as a read: not the read that learnt it). */
  private peerClosed(cause: TensorPipeError): TensorPipeError {
    return new TensorPipeError(ErrorCode.PEER_CLOSED, `the peer closed the pipe (${cause.message})`, {
      where: `pipe to ${this.host.peer}`,
      errnoName: cause.errnoName,
      syscall: cause.syscall,
      cause,
    });
  }

  /**
   * Connection `what` ended (`cause`) while the pipe stayed open. A peer
   * that closed its pipe ended main too, but main's end comes behind the
   * messages it still holds, which a slow reader here may take long to
   * read. So the pipe fails, idle or not, only once main has been waiting
   * for the next descriptor, with nothing come, for two checks in a row.
   */
  private cut(what: string, cause: Error): void {
    let waitedSince = -1;
    const check = (): void => {
      const host = this.host;
      if (host.settled || this.cause) return;
      const waiting = !host.holdsMessage && host.readsInFlight === 0;
      if (waiting && waitedSince === host.messagesReceived) {
        const err = host.describe(cause);
        host.fail(
          err.code === ErrorCode.PEER_CLOSED
            ? new TensorPipeError(ErrorCode.CONNECTION_RESET, `the peer closed the pipe's ${what} connection while the pipe stayed open`, {
                where: `pipe to ${host.peer}`,
                cause: err,
              })
            : err,
        );
        return;
      }
      waitedSince = waiting ? host.messagesReceived : -1;
      setTimeout(check, CUT_CONNECTION_CHECK_MS).unref();
    };
    check();
  }
}
