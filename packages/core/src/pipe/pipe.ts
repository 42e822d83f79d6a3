/**
 * One end of a pipe: an ordered stream of messages in each direction over a
 * main connection (descriptors and payloads), a reply connection
 * (DescriptorReply) and one channel per chosen device pair (tensors). The
 * public API alone: the state and the operations are in PipeEngine.
 */
import { type Deadline, type OperationOptions, checkOperationOptions, operationDeadline } from "../abort.js";
import type { Device } from "../device.js";
import { CPU_DEVICE, sameDevice } from "../device.js";
import { describeValue } from "../describe-value.js";
import { ErrorCode, TensorPipeError, closedError } from "../errors.js";
import type { FlightEvent } from "../flight-recorder.js";
import type { Allocation, Descriptor, Message, ReceivedMessage } from "../message.js";
import { isDevice } from "../message-check.js";
import { IncomingMemory } from "../message-memory.js";
import type { PathReport } from "../path-report.js";
import type { DevicePairChoice } from "../protocol/handshake.js";
import type { PipeCounters, PipeStats } from "../stats.js";
import { DONE } from "../transport.js";
import { PipeEngine } from "./engine.js";
import { holdLentViews } from "../lent-views.js";
import { recordLoan, takeBack, takeLoans } from "./loans.js";
import type { PipeParts } from "./parts.js";

function invalid(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.INVALID_ARG, message);
}

/** release() of a message that holds nothing lent. */
const NOTHING_LENT = (): void => undefined;

/** A write whose tensors were not all sent at once, as its timeout or abort names it: the likeliest cause is a peer that is not reading. */
const WAITING_WRITE = "pipe write (a large tensor goes out only as the peer reads it: is the peer reading, and not itself waiting on this write?)";

/** One end of a pipe: ordered messages each way. Made by Context.connect() and Listener.accept(); write() sends, readDescriptor() then read() receive into memory the caller provides. */
export class Pipe implements AsyncIterable<ReceivedMessage> {
  /** The transport negotiated ("uv", "shm", ...). */
  readonly transport: string;
  /** The channel negotiated for each (device here, device there) pair. */
  readonly channelForDevicePair: readonly DevicePairChoice[];
  /** The peer, as text to show: the URL dialled, or the address the pipe came from. */
  readonly peer: string;
  /**
   * The name the peer's context gave (its ContextOptions.name), or
   * undefined where it gave none. A listener learns the dialler's name
   * from the handshake's first packet (upstream TensorPipe sends it too);
   * a dialler learns the listener's from a listener of this library. Under
   * authentication a name counts only when the handshake proved it with
   * the shared secret: that proves the peer holds the secret, not that it
   * is who the name says (any holder may give any name). A name over 1024
   * characters or with control characters is not reported. It is the
   * peer's word otherwise unchecked: escape it before showing it.
   */
  readonly peerName: string | undefined;
  /**
   * The peer's process id, as the kernel recorded it when the pipe's main
   * connection was made (shm: the Unix socket's SO_PEERCRED), or undefined
   * where the transport cannot tell (uv).
   */
  readonly peerPid: number | undefined;
  /**
   * The path negotiation took, from this end: what each side offered, the
   * transport and channels chosen, and why every other one was not.
   */
  readonly path: PathReport;
  /** Settles (never rejects) with the error that ended the pipe. */
  readonly closed: Promise<TensorPipeError>;
  private readonly engine: PipeEngine;

  constructor(parts: PipeParts) {
    this.transport = parts.transport;
    this.channelForDevicePair = parts.pairs;
    this.peer = parts.peer;
    this.peerName = parts.peerName;
    this.peerPid = parts.peerPid;
    this.path = parts.path;
    this.engine = new PipeEngine(this, parts);
    this.closed = this.engine.lifecycle.closed;
    this.engine.observer.opened(parts.side, parts.path);
  }

  /** @internal Live counters; stats() copies them. */
  get counters(): PipeCounters {
    return this.engine.observer.counters;
  }

  /**
   * The pipe's last events, oldest first: the handshake's steps, the path,
   * each message's size and time, errors (ContextOptions.flightRecorder;
   * empty when it is 0). A failed pipe's error carries them as `flightRecord`.
   */
  flightRecord(): FlightEvent[] {
    return this.engine.observer.events();
  }

  /** Messages and bytes each way so far, by channel, and errors by code. */
  stats(): PipeStats {
    return this.counters.snapshot();
  }

  /** The channel name used for tensors from `local` here to `remote` there. */
  channelFor(local: Device, remote: Device): string | undefined {
    for (const [name, d] of [
      ["local", local],
      ["remote", remote],
    ] as const) {
      if (!isDevice(d)) throw invalid(`channelFor(local, remote): ${name} must be a device { type, index }, e.g. CPU_DEVICE; got ${describeValue(d)}`);
    }
    return this.channelForDevicePair.find((p) => sameDevice(p.local, local) && sameDevice(p.remote, remote))?.channel;
  }

  /**
   * Sends a message. Resolves when all its bytes have left this process's
   * memory, so its buffers may be reused.
   */
  write(message: Message, options?: OperationOptions): Promise<void> {
    const { engine } = this;
    const refusal = engine.refusal;
    if (refusal) return refusal === engine.failure ? this.engine.ended() : Promise.reject(refusal);
    const started = engine.observer.timing ? performance.now() : 0;
    let deadline: Deadline | undefined;
    let sent: Promise<void>;
    // Taken before send(), which lets go of the message's parts.
    let held: (() => void) | undefined;
    try {
      deadline = operationDeadline(options, "pipe write");
      const prepared = engine.writer.prepare(message);
      takeLoans(prepared.tensors, engine);
      held = holdLentViews(prepared.payloads, prepared.tensors);
      sent = engine.writer.send(prepared, started);
    } catch (e) {
      // A write refused sends nothing: the views it held go back as asked.
      held?.();
      deadline?.release();
      return this.refuse(e);
    }
    if (held) void sent.then(held, held);
    return this.guard(sent, deadline, engine.writer.tensorsWaited ? WAITING_WRITE : "pipe write");
  }

  /**
   * Memory of `length` bytes to write a CPU tensor from, fresh for each
   * call. Where this pipe's channel shares memory with the peer (cma
   * between tensorpipe-js processes of one machine), it is a slot of the
   * pipe's shared pool: write() then sends only its place, the reader's
   * readMessage() gets a view of this same memory with no copy on either
   * side, and the write detaches this view (it reads as empty after), so
   * that nothing here changes bytes the peer holds. The slot comes back
   * when the reader releases its message (or drops it); while the pool is
   * at its bound (CmaChannelOptions.poolBytes) a loan waits, under
   * `options`. Elsewhere (another machine, an upstream peer) it is plain
   * memory, copied as any tensor is. A slot of a pool goes in one write,
   * through this pipe only (ERR_TP_INVALID_ARG otherwise). The pool's
   * memory is the peer's to read and write while it holds it: keep
   * nothing else there.
   */
  loan(length: number, options?: OperationOptions): Promise<Uint8Array> {
    const { engine } = this;
    if (!Number.isSafeInteger(length) || length < 0) {
      return this.refuse(invalid(`loan length must be a whole number of bytes from 0 to ${Number.MAX_SAFE_INTEGER}, got ${describeValue(length)}`));
    }
    const refusal = engine.refusal;
    if (refusal) return refusal === engine.failure ? this.engine.ended() : Promise.reject(refusal);
    let lent: Promise<Uint8Array> | undefined;
    try {
      checkOperationOptions(options, "pipe loan");
      lent = engine.routes.between(CPU_DEVICE, CPU_DEVICE)?.loan?.(length, options);
    } catch (e) {
      return this.refuse(e);
    }
    if (lent === undefined) {
      try {
        return Promise.resolve(new Uint8Array(length));
      } catch (e) {
        return this.refuse(new TensorPipeError(ErrorCode.INVALID_ARG, `a loan of ${length} bytes cannot be had: ${(e as Error).message}`, { cause: e }));
      }
    }
    return lent.then((view) => recordLoan(view, engine, this.peer), this.loanRefused);
  }

  /** A loan refused on its own account (it gave up waiting at its timeout or signal, or no pool holds it) is counted; one the pipe's end rejects is not. */
  private readonly loanRefused = (e: unknown): Promise<never> => (this.engine.over ? Promise.reject(e) : this.refuse(e));

  /**
   * Gives back a loan that will not be written (an error path, a request
   * given up): its slot is free for the next loan at once, where a loan
   * dropped waits for a collection, and `view` reads as empty after. Plain
   * memory, and a loan written already, are left as they are.
   */
  unloan(view: Uint8Array): void {
    if (!(view instanceof Uint8Array)) throw invalid(`unloan() takes a Uint8Array that loan() gave, got ${describeValue(view)}`);
    if (takeBack(view, this.engine)) this.engine.routes.between(CPU_DEVICE, CPU_DEVICE)?.unloan?.(view);
  }

  /** Resolves with the next message's descriptor; call read() with memory for it next. */
  readDescriptor(options?: OperationOptions): Promise<Descriptor> {
    let deadline: Deadline | undefined;
    try {
      deadline = operationDeadline(options, "readDescriptor");
    } catch (e) {
      return this.engine.failure ? this.engine.ended() : this.refuse(e);
    }
    const got = this.take(deadline, "readDescriptor");
    return deadline ? got.finally(() => deadline.release()) : got;
  }

  /**
   * Reads the message whose descriptor was returned last into `allocation`:
   * payloads and tensors land right in the memory given.
   */
  read(allocation: Partial<Allocation>, options?: OperationOptions): Promise<void> {
    let deadline: Deadline | undefined;
    try {
      deadline = operationDeadline(options, "pipe read");
    } catch (e) {
      return this.engine.failure ? this.engine.ended() : this.refuse(e);
    }
    return this.readInto(allocation, deadline, "pipe read");
  }

  /** Reads the next message into fresh CPU memory, made as its parts are asked for. */
  async readMessage(options?: OperationOptions): Promise<ReceivedMessage> {
    let deadline: Deadline | undefined;
    try {
      deadline = operationDeadline(options, "readMessage");
    } catch (e) {
      return this.engine.failure ? this.engine.ended() : this.refuse(e);
    }
    // One deadline for the whole message, not one for each half.
    let d: Descriptor;
    try {
      d = await this.take(deadline, "readMessage");
    } catch (e) {
      deadline?.release();
      throw e;
    }
    return this.receive(d, deadline);
  }

  /**
   * Yields messages until the peer closes the pipe between messages, or
   * this side closes it (close(), or its context's): the loop then just
   * ends, without an error. A peer's close in the middle of a message, or
   * with writes of this side unfinished, throws ERR_TP_PEER_CLOSED.
   * Leaving the loop (`break`) leaves the pipe open, for writes and later
   * reads: close() it when done, as a pipe is both ways (a stream's
   * iterator destroys it).
   */
  async *[Symbol.asyncIterator](): AsyncIterator<ReceivedMessage> {
    for (;;) {
      let d: Descriptor;
      try {
        d = await this.readDescriptor();
      } catch (e) {
        if (e === this.engine.end.cleanEnd || (e as TensorPipeError).code === ErrorCode.CLOSED) return;
        throw e;
      }
      yield await this.receive(d, undefined);
    }
  }

  /** Whether the pipe has ended: closed here, ended by the peer, or failed (`closed` says which). */
  get isClosed(): boolean {
    return this.engine.over;
  }

  /** Closes the pipe; pending operations reject with ERR_TP_CLOSED. */
  close(): void {
    this.engine.fail(closedError("pipe"), "closed");
  }

  /** close(), for `await using`: resolves once the pipe has ended. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
    await this.closed;
  }

  /** The next descriptor, waited for under `deadline` (which the caller releases). */
  private take(deadline: Deadline | undefined, what: "readDescriptor" | "readMessage"): Promise<Descriptor> {
    const { engine } = this;
    if (engine.failure) return this.engine.ended();
    if (engine.reader.callerHolds) return this.refuse(invalid(`${what}() while the descriptor readDescriptor() gave is unread: read() that message first`));
    return engine.reader.take(deadline?.signal, what, what === "readMessage");
  }

  /** Lands the offered message in `allocation` (or, readMessage()'s, memory made as it goes); releases `deadline` once it is over. */
  private readInto(allocation: Partial<Allocation> | IncomingMemory, deadline: Deadline | undefined, what: string): Promise<void> {
    const { engine } = this;
    const refused = (e: unknown): Promise<never> => {
      deadline?.release();
      return e === engine.failure ? this.engine.ended() : this.refuse(e);
    };
    if (engine.failure) return refused(engine.failure);
    if (!(allocation instanceof IncomingMemory ? engine.reader.canRead : engine.reader.callerHolds)) {
      deadline?.release();
      return Promise.reject(invalid("read() needs a descriptor: call readDescriptor() first"));
    }
    let landed: Promise<void>;
    try {
      const started = engine.observer.timing ? performance.now() : 0;
      landed = allocation instanceof IncomingMemory ? engine.reader.readIncoming(allocation, started) : engine.reader.read(allocation, started);
    } catch (e) {
      return refused(e);
    }
    return this.guard(landed, deadline, what);
  }

  /** Reads the message of descriptor `d` into fresh CPU memory; releases `deadline` once it is over. */
  private async receive(d: Descriptor, deadline: Deadline | undefined): Promise<ReceivedMessage> {
    let memory: IncomingMemory;
    try {
      memory = new IncomingMemory(d, this.engine.routes.between(CPU_DEVICE, CPU_DEVICE)?.recvLent !== undefined);
    } catch (e) {
      deadline?.release();
      if (e instanceof TensorPipeError) throw e;
      // Memory for it cannot be had: nor can the stream skip the message.
      const err = new TensorPipeError(
        ErrorCode.SYSTEM,
        `cannot allocate the ${d.payloads.length} payload(s) and ${d.tensors.length} tensor(s) of a message: ${(e as Error).message}; lower ContextOptions.maxMessageBytes to refuse such messages, or read them with readDescriptor() and read()`,
        { where: `pipe to ${this.peer}`, cause: e },
      );
      this.engine.fail(err);
      throw err;
    }
    try {
      await this.readInto(memory, deadline, "readMessage");
    } catch (e) {
      memory.releaseLent();
      throw e;
    }
    const release = memory.lent ? () => memory.releaseLent() : NOTHING_LENT;
    return {
      metadata: d.metadata,
      payloads: d.payloads.map((p, i) => ({ data: memory.payloads[i]!, metadata: p.metadata })),
      tensors: d.tensors.map((t, i) => ({ buffer: memory.tensors[i]!, length: t.length, sourceDevice: t.sourceDevice, metadata: t.metadata })),
      release,
      [Symbol.dispose]: release,
    };
  }

  /** An operation refused for its own reason: counted, the pipe goes on. */
  private refuse(e: unknown): Promise<never> {
    if (e instanceof TensorPipeError) this.engine.observer.refused(e);
    else this.engine.observer.counters.countError(ErrorCode.SYSTEM);
    return Promise.reject(e);
  }

  /** Cancelling an operation under way breaks the stream, so it fails the pipe. */
  private guard<T>(p: Promise<T>, deadline: Deadline | undefined, what: string): Promise<T> {
    if (deadline === undefined) return p;
    // Done already: an abort after the call comes too late to undo it.
    if (p === DONE) {
      deadline.release();
      return p;
    }
    return deadline.race(p, what, (err) => this.engine.fail(err));
  }
}
