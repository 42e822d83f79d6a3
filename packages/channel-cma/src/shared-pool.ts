/**
 * The writer's half of zero-copy: a pool of shared memory per pipe, whose
 * slots Pipe.loan() lends. A slot written goes to the peer by its place
 * (SlotPlace) and comes back when the peer releases its view; until then
 * no loan hands it out again, and the view this side filled is detached at
 * the write, so nothing here can change bytes the peer holds. Segments are
 * sealed memfds that only the proven peer of the pipe takes (pidfd_getfd
 * needs the rights process_vm_readv does); the pool grows a segment at a
 * time up to its bound, and a loan past it waits for a release.
 */
import {
  type Deadline,
  ErrorCode,
  type OperationOptions,
  TensorPipeError,
  abortError,
  bufferTag,
  lentBuffer,
  operationDeadline,
} from "@tensorpipe/core/backend";
import type { NativeAddon } from "./native.js";
import { TurnEndRegistry } from "./turn-end-registry.js";

/** Where a lent slot's bytes are, as the peer is told. */
export interface SlotPlace {
  /** The segment's number at the writer (never reused while the pipe lives). */
  segment: number;
  /** The writer's fd of that segment, for pidfd_getfd. */
  fd: number;
  offset: number;
  length: number;
  /** The slot's number and its lending's generation: the peer's release names both. */
  slot: number;
  generation: number;
}

const PAGE = 4096;
const MiB = 1024 * 1024;
/** Segments of at least this much (or the pool's bound, if less), so that small slots come many to a segment (and a memfd). */
const SEGMENT_MIN = 2 * MiB;
/** A segment wholly free for this long goes back to the system: an idle pipe's pool follows its traffic. */
export const IDLE_MS = 5000;
/** The largest pool CmaChannelOptions.poolBytes may ask for. */
export const MAX_POOL_BYTES = 1024 * MiB;

interface Segment {
  /** The addon's number for it. */
  id: number;
  fd: number;
  bytes: number;
  slotSize: number;
  /** Slots of it not lent. */
  free: number;
  slots: Slot[];
  /** When a slot of it was last lent (performance.now()). */
  usedAt: number;
}

interface Slot {
  readonly pool: SharedPool;
  readonly index: number;
  readonly segment: Segment;
  readonly offset: number;
  generation: number;
  state: "free" | "loaned" | "sent";
  /** Places of it the peer holds (one per tensor sent from it). */
  places: number;
  /** The loan out, while loaned: what tells its collection apart from a later loan's. */
  loan: Loan | undefined;
}

/** One loan of a slot, as the registry of unsent loans holds it: nothing of it may hold the loan's memory, or it would never be collected. */
interface Loan {
  slot: Slot;
  registered: boolean;
}

interface Waiter {
  length: number;
  /** It waits for the releases that have arrived before the pool grows for it. */
  patient: boolean;
  /** The caller's options, and when it asked: its deadline is made once it waits past its patience. */
  options: OperationOptions | undefined;
  since: number;
  deadline: Deadline | undefined;
  resolve(view: Uint8Array): void;
  reject(e: unknown): void;
}

/** The class a loan of `length` bytes takes: a power of two from a page to 2 MiB, past that a multiple of 2 MiB. */
function slotSizeFor(length: number): number {
  if (length > 2 * MiB) return Math.ceil(length / (2 * MiB)) * 2 * MiB;
  return Math.max(PAGE, 2 ** Math.ceil(Math.log2(Math.max(1, length))));
}

/** The slot a loan's buffer lies in, while it is lent, whichever pool lent it (SharedPool.slotOf() keeps its own). */
const loanSlot = bufferTag<Slot | undefined>();

/** One pipe's pool. */
export class SharedPool {
  private readonly segments: Segment[] = [];
  /** Every slot by its number (a slot keeps its number while its segment lives). */
  private readonly slots: (Slot | undefined)[] = [];
  /** Numbers of slots whose segments went, for the next ones: the table holds what the pool held at most. */
  private readonly freeNumbers: number[] = [];
  /** The generation a number's next slot starts at, where an earlier slot had it: a late release of that one is no release of the next. */
  private readonly nextGeneration: number[] = [];
  private readonly waiters: Waiter[] = [];
  private bytes = 0;
  /** Slots sent and not released: the peer's hold on the pool. */
  private sent = 0;
  private closedWith?: Error;
  private trimmer?: NodeJS.Timeout;
  /** Patient loans wait for the end of this turn of the loop. */
  private patienceEnds = false;
  /** A loan dropped unsent goes back to the pool when it is collected. */
  private readonly unsent = new TurnEndRegistry<Loan>(
    (loan) => {
      if (loan.slot.loan === loan) this.free(loan.slot);
    },
    (loan) => loan.slot.loan !== loan,
  );

  constructor(
    private readonly addon: NativeAddon,
    /** The most bytes of segments the pool holds. */
    readonly bound: number,
    /** Takes the releases the peer has sent and this side not yet read (Connection.serveArrived). */
    private readonly takeArrived: () => void = () => undefined,
    /** Whether bytes from the peer wait unread (Connection.hasPendingInput): releases, perhaps. */
    private readonly hasArrived: () => boolean = () => false,
  ) {}

  /** Slots the peer holds (the channel reads its releases while it holds any). */
  get lent(): number {
    return this.sent;
  }

  /** A fresh slot of at least `length` bytes, waited for under `options` while the pool is at its bound. */
  loan(length: number, options: OperationOptions | undefined): Promise<Uint8Array> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    const slotSize = slotSizeFor(length);
    if (slotSize > this.bound) {
      const raise =
        slotSize > MAX_POOL_BYTES
          ? `no pool holds that (CmaChannelOptions.poolBytes is at most ${MAX_POOL_BYTES})`
          : `raise CmaChannelOptions.poolBytes (to at most ${MAX_POOL_BYTES})`;
      return Promise.reject(
        new TensorPipeError(
          ErrorCode.INVALID_ARG,
          `a loan of ${length} bytes takes a slot of ${slotSize}, more than the pipe's shared pool (${this.bound} bytes): ${raise}, or write the tensor from memory of your own`,
        ),
      );
    }
    // A release comes a little after the answer it goes with, on another
    // connection: a front that lends again as each answer comes would
    // grow its pool by every slot whose release is on its way (a 4-worker
    // fan-out's pools grew by 512 segments, to their bound, in its first
    // second of 1 MiB loans; by 16 now, one per 2 slots in flight). So
    // a loan that finds no slot free while the peer holds some takes the
    // releases that have arrived, and grows the pool only if none of them
    // frees a slot by the end of this turn of the loop.
    const patient = this.sent > 0;
    let view: Uint8Array | undefined;
    try {
      view = this.tryLoan(length, !patient);
    } catch (e) {
      return Promise.reject(e);
    }
    if (view) return Promise.resolve(view);
    let waiter!: Waiter;
    const waited = new Promise<Uint8Array>((resolve, reject) => {
      waiter = {
        length,
        patient,
        options,
        since: options?.timeout === undefined ? 0 : performance.now(),
        deadline: undefined,
        resolve: (v) => {
          waiter.deadline?.release();
          resolve(v);
        },
        reject: (e) => {
          waiter.deadline?.release();
          reject(e);
        },
      };
    });
    this.waiters.push(waiter);
    if (patient) {
      this.takeArrived();
      this.endPatienceThisTurn();
    } else this.armDeadline(waiter);
    return waited;
  }

  /**
   * Starts `w`'s deadline, what is left of it: made only for a loan that
   * waits for the pool's bound, so that one served at once, or by the
   * releases of its turn, costs no timer.
   */
  private armDeadline(w: Waiter): void {
    const { options } = w;
    if (!options) return;
    const timeout = options.timeout === undefined ? undefined : Math.max(0, options.timeout - (performance.now() - w.since));
    const deadline = operationDeadline({ signal: options.signal, timeout });
    if (!deadline) return;
    w.deadline = deadline;
    const abort = (): void => {
      const i = this.waiters.indexOf(w);
      if (i < 0) return;
      this.waiters.splice(i, 1);
      const err = abortError(deadline.signal, "pipe loan");
      // Who holds the pool when the wait ends (not when it began, nor at each loan that waits); a reason of the caller's own is left as it is.
      if (err !== deadline.signal.reason) err.message = `${err.message}: ${this.describeHold()}`;
      w.reject(err);
    };
    if (deadline.signal.aborted) abort();
    else deadline.signal.addEventListener("abort", abort, { once: true });
  }

  /**
   * The place of `view` when it lies within a loan of this pool, which
   * goes to the peer now: the slot is the peer's until it releases every
   * place sent from it. The loan's buffer is detached once the tensors of
   * this turn are out (two tensors of one message may share a loan), so
   * that nothing here changes bytes the peer holds. undefined for any
   * other memory.
   */
  send(view: Uint8Array): SlotPlace | undefined {
    const buffer = view.buffer as ArrayBuffer;
    const slot = this.slotOf(buffer);
    if (!slot || slot.state === "free") return undefined;
    if (slot.state === "loaned") {
      this.unsent.unregister(slot.loan!);
      slot.loan = undefined;
      slot.state = "sent";
      this.sent++;
      queueMicrotask(() => {
        loanSlot.set(buffer, undefined);
        this.addon.detachBuffer(buffer);
      });
    }
    slot.places++;
    return {
      segment: slot.segment.id,
      fd: slot.segment.fd,
      offset: slot.offset + view.byteOffset,
      length: view.byteLength,
      slot: slot.index,
      generation: slot.generation,
    };
  }

  /** Whether `view` lies within a loan of this pool not yet sent. */
  lends(view: Uint8Array): boolean {
    return this.slotOf(view.buffer)?.state === "loaned";
  }

  /** The slot of this pool that `buffer` is a loan of, if it is one. */
  private slotOf(buffer: ArrayBufferLike): Slot | undefined {
    const slot = loanSlot.get(buffer);
    return slot?.pool === this ? slot : undefined;
  }

  /** A loan of this pool given back unsent, or that went by copy after all (inline, or to an upstream peer): free again, its buffer detached. */
  giveBack(view: Uint8Array): void {
    const buffer = view.buffer as ArrayBuffer;
    const slot = this.slotOf(buffer);
    if (slot?.state !== "loaned") return;
    loanSlot.set(buffer, undefined);
    this.addon.detachBuffer(buffer);
    this.free(slot);
  }

  /** The peer released a place of slot `index` it got in `generation`; a protocol error for one it does not hold. */
  released(index: number, generation: number): void {
    const slot = this.slots[index];
    if (slot?.state !== "sent" || slot.generation !== generation) {
      throw new TensorPipeError(ErrorCode.PROTOCOL, `peer released pool slot ${index} (generation ${generation}), which it does not hold`, {
        where: "cma pool",
      });
    }
    if (--slot.places > 0) return;
    this.sent--;
    slot.generation = (slot.generation + 1) >>> 0;
    this.free(slot);
  }

  /** Ends the pool: waiting loans reject with `error`; the memory goes with its last view. */
  close(error: Error): void {
    if (this.closedWith) return;
    this.closedWith = error;
    clearInterval(this.trimmer);
    for (const w of this.waiters.splice(0)) w.reject(error);
    for (const s of this.segments) this.addon.closeSegment(s.id);
    this.segments.length = 0;
    this.slots.length = 0;
  }

  /** Who holds the pool, for a loan that waits. */
  private describeHold(): string {
    let peer = 0;
    let here = 0;
    for (const s of this.segments) {
      for (const slot of s.slots) {
        if (slot.state === "sent") peer += s.slotSize;
        else if (slot.state === "loaned") here += s.slotSize;
      }
    }
    return `the shared pool's ${this.bound} bytes are taken: ${peer} by messages the peer has not released, ${here} by loans of this side not yet written`;
  }

  private free(slot: Slot): void {
    if (slot.loan) this.unsent.unregister(slot.loan);
    slot.loan = undefined;
    slot.places = 0;
    slot.state = "free";
    slot.segment.free++;
    this.serveWaiters();
  }

  private serveWaiters(): void {
    while (this.waiters.length > 0) {
      const waiter = this.waiters[0]!;
      const view = this.tryLoan(waiter.length, !waiter.patient);
      if (!view) return;
      this.waiters.shift()!.resolve(view);
    }
  }

  /**
   * At the end of a turn in which no releases came (the peer's bytes
   * unread then wait for the turn after: a read completed in this turn
   * frees its slot only once its continuation has run), patient loans may
   * grow the pool.
   */
  private endPatienceThisTurn(): void {
    if (this.patienceEnds) return;
    this.patienceEnds = true;
    setImmediate(() => {
      this.patienceEnds = false;
      if (this.closedWith) return;
      if (this.hasArrived()) {
        this.takeArrived();
        this.endPatienceThisTurn();
        return;
      }
      const ended = this.waiters.filter((w) => w.patient);
      for (const w of ended) w.patient = false;
      try {
        this.serveWaiters();
      } catch (e) {
        for (const w of this.waiters.splice(0)) w.reject(e);
      }
      for (const w of ended) if (this.waiters.includes(w)) this.armDeadline(w);
    });
  }

  /** A slot lent now, from a free one or (`mayGrow`) a new segment or room made by dropping segments wholly free; undefined when none is. */
  private tryLoan(length: number, mayGrow: boolean): Uint8Array | undefined {
    const size = slotSizeFor(length);
    const slot = this.freeSlot(size) ?? (mayGrow ? this.grow(size) : undefined);
    if (!slot) return undefined;
    slot.state = "loaned";
    slot.segment.free--;
    slot.segment.usedAt = performance.now();
    const buffer = lentBuffer(this.addon.viewSegment(slot.segment.id, slot.offset, length));
    loanSlot.set(buffer, slot);
    const loan: Loan = { slot, registered: false };
    slot.loan = loan;
    this.unsent.register(buffer, loan);
    return new Uint8Array(buffer);
  }

  private freeSlot(size: number): Slot | undefined {
    for (const s of this.segments) {
      if (s.slotSize !== size || s.free === 0) continue;
      for (const slot of s.slots) if (slot.state === "free") return slot;
    }
    return undefined;
  }

  private grow(size: number): Slot | undefined {
    const bytes = Math.max(size, Math.min(SEGMENT_MIN, this.bound));
    if (this.bytes + bytes > this.bound) this.dropIdle(this.bytes + bytes - this.bound, Infinity);
    if (this.bytes + bytes > this.bound) return undefined;
    const [id, fd] = this.addon.createSegment(bytes);
    const segment: Segment = { id, fd, bytes, slotSize: size, free: Math.floor(bytes / size), slots: [], usedAt: performance.now() };
    for (let offset = 0; offset + size <= bytes; offset += size) {
      const index = this.freeNumbers.pop() ?? this.slots.length;
      const slot: Slot = { pool: this, index, segment, offset, generation: this.nextGeneration[index] ?? 0, state: "free", places: 0, loan: undefined };
      this.slots[index] = slot;
      segment.slots.push(slot);
    }
    this.segments.push(segment);
    this.bytes += bytes;
    if (!this.trimmer) {
      this.trimmer = setInterval(() => this.trim(), IDLE_MS);
      this.trimmer.unref();
    }
    return segment.slots[0];
  }

  /** Gives back the segments that have been wholly free for IDLE_MS. */
  private trim(): void {
    this.dropIdle(Infinity, performance.now() - IDLE_MS);
    if (this.segments.length === 0) {
      clearInterval(this.trimmer);
      this.trimmer = undefined;
    }
  }

  /** Drops segments of which no slot is lent and none was since `before`, oldest first, until `needed` bytes are free. */
  private dropIdle(needed: number, before: number): void {
    for (let i = 0; i < this.segments.length && needed > 0; ) {
      const s = this.segments[i]!;
      if (s.free !== s.slots.length || s.usedAt > before) {
        i++;
        continue;
      }
      this.segments.splice(i, 1);
      for (const slot of s.slots) {
        this.slots[slot.index] = undefined;
        this.nextGeneration[slot.index] = (slot.generation + 1) >>> 0;
        this.freeNumbers.push(slot.index);
      }
      this.addon.closeSegment(s.id);
      this.bytes -= s.bytes;
      needed -= s.bytes;
    }
  }
}
