/**
 * Counters of what pipes carried, kept as plain numbers on the hot path and
 * copied out by `pipe.stats()` and `context.stats()`. A message counts when
 * the pipe takes it: a write once it is accepted, a read once read() is
 * given memory for it.
 */

/** What one channel carried for a pipe, or for a context's pipes. */
export interface ChannelStats {
  /** Tensors handed to the channel to send. */
  tensorsSent: number;
  /** Tensors the channel was given memory to receive. */
  tensorsReceived: number;
  /** Their bytes, sent. */
  bytesSent: number;
  /** Their bytes, received. */
  bytesReceived: number;
}

/** What a pipe carried each way, by channel, and the errors it gave. */
export interface PipeStats {
  /** Messages write() took. */
  messagesSent: number;
  /** Messages read() was given memory for. */
  messagesReceived: number;
  /** Payload and tensor bytes (descriptors and framing not counted). */
  bytesSent: number;
  /** Payload and tensor bytes received. */
  bytesReceived: number;
  /** By channel name. */
  channels: Record<string, ChannelStats>;
  /**
   * By error code: the error that ended the pipe (not counted when this
   * side closed it, nor when the peer closed it between messages, the
   * stream's end) and each operation refused on its own account (an
   * invalid message or allocation, a read or loan that gave up at its
   * abort or timeout).
   */
  errors: Record<string, number>;
}

/** The sum over a context's pipes, open and ended, and its listeners' drops. */
export interface ContextStats extends PipeStats {
  /** Pipes this context opened or accepted. */
  pipesOpened: number;
  /** Of them, those still open. */
  pipesOpen: number;
  /** Connections listeners dropped before they became pipes, by error code. */
  connectionErrors: Record<string, number>;
}

/** Adds `n` to the count of `code`. */
export function addCount(counts: Map<string, number>, code: string, n = 1): void {
  counts.set(code, (counts.get(code) ?? 0) + n);
}

/**
 * Where every live counter starts: zero as a double. V8 keeps a field
 * that starts as a small integer in that form, and the first count past
 * 2^30 (a GiB of bytes: a thousand 1 MiB messages) changes the layout of
 * every pipe's counters, which throws away the optimized code of the hot
 * path that counts, to be compiled again thousands of messages later.
 * -0 is a double from the first; `+ 0` turns it into 0 in a snapshot.
 */
const ZERO = -0;

function emptyChannel(): ChannelStats {
  return { tensorsSent: ZERO, tensorsReceived: ZERO, bytesSent: ZERO, bytesReceived: ZERO };
}

/** A copy of `c` that reads 0 where it counted nothing (see ZERO). */
function channelSnapshot(c: ChannelStats): ChannelStats {
  return { tensorsSent: c.tensorsSent + 0, tensorsReceived: c.tensorsReceived + 0, bytesSent: c.bytesSent + 0, bytesReceived: c.bytesReceived + 0 };
}

/** The live counters of one pipe (or a sum of pipes). */
export class PipeCounters {
  messagesSent = ZERO;
  messagesReceived = ZERO;
  bytesSent = ZERO;
  bytesReceived = ZERO;
  readonly channels = new Map<string, ChannelStats>();
  readonly errors = new Map<string, number>();

  /** The counters of `name`, made on first use. */
  channel(name: string): ChannelStats {
    let c = this.channels.get(name);
    if (!c) this.channels.set(name, (c = emptyChannel()));
    return c;
  }

  countError(code: string): void {
    addCount(this.errors, code);
  }

  /** Adds `other` into these counters. */
  add(other: PipeCounters): void {
    this.messagesSent += other.messagesSent;
    this.messagesReceived += other.messagesReceived;
    this.bytesSent += other.bytesSent;
    this.bytesReceived += other.bytesReceived;
    for (const [name, c] of other.channels) {
      const into = this.channel(name);
      into.tensorsSent += c.tensorsSent;
      into.tensorsReceived += c.tensorsReceived;
      into.bytesSent += c.bytesSent;
      into.bytesReceived += c.bytesReceived;
    }
    for (const [code, n] of other.errors) addCount(this.errors, code, n);
  }

  /** A copy that later traffic does not change. */
  snapshot(): PipeStats {
    return {
      messagesSent: this.messagesSent + 0,
      messagesReceived: this.messagesReceived + 0,
      bytesSent: this.bytesSent + 0,
      bytesReceived: this.bytesReceived + 0,
      channels: Object.fromEntries([...this.channels].map(([name, c]) => [name, channelSnapshot(c)])),
      errors: Object.fromEntries(this.errors),
    };
  }
}
