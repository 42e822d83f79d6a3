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
import { ErrorCode, TensorPipeError, raceSignal } from "@tensorpipe/core/backend";
import type { NativeAddon } from "./native.js";

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
/** Segments of at least this much, so that small slots come many to a segment (and a memfd). */
const SEGMENT_MIN = 2 * 1024 * 1024;

interface Segment {
  /** The addon's number for it. */
  id: number;
  fd: number;
  bytes: number;
  slotSize: number;
  /** Slots of it not lent. */
  free: number;
  slots: Slot[];
}

interface Slot {
  readonly index: number;
  readonly segment: Segment;
  readonly offset: number;
  generation: number;
  state: "free" | "loaned" | "sent";
  /** The ArrayBuffer of the loan out, while loaned. */
  buffer: ArrayBuffer | undefined;
}

interface Waiter {
  length: number;
  resolve(view: Uint8Array): void;
  reject(e: unknown): void;
}

/** The class a loan of `length` bytes takes: a power of two, at least a page. */
function slotSizeFor(length: number): number {
  return Math.max(PAGE, 2 ** Math.ceil(Math.log2(Math.max(1, length))));
}

/** One pipe's pool. */
export class SharedPool {
  private readonly segments: Segment[] = [];
  /** Every slot by its number (a slot keeps its number for the pool's life). */
  private readonly slots: (Slot | undefined)[] = [];
  private readonly byBuffer = new WeakMap<ArrayBuffer, Slot>();
  private readonly waiters: Waiter[] = [];
  private bytes = 0;
  /** Slots sent and not released: the peer's hold on the pool. */
  private sent = 0;
  private closedWith?: Error;
  /** A loan dropped unsent goes back to the pool when it is collected. */
  private readonly unsent = new FinalizationRegistry<Slot>((slot) => {
    if (slot.state === "loaned") this.free(slot);
  });

  constructor(
    private readonly addon: NativeAddon,
    /** The most bytes of segments the pool holds. */
    readonly bound: number,
  ) {}

  /** Whether the peer holds slots (the channel reads its releases while it does). */
  get lent(): number {
    return this.sent;
  }

  /** A fresh slot of at least `length` bytes, waited for under `signal` while the pool is at its bound. */
  loan(length: number, signal: AbortSignal | undefined): Promise<Uint8Array> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    if (slotSizeFor(length) > this.bound) {
      return Promise.reject(
        new TensorPipeError(
          ErrorCode.INVALID_ARG,
          `a loan of ${length} bytes is larger than the pipe's shared pool (${this.bound} bytes): raise CmaChannelOptions.poolBytes, or write the tensor from memory of your own`,
        ),
      );
    }
    let view: Uint8Array | undefined;
    try {
      view = this.tryLoan(length);
    } catch (e) {
      return Promise.reject(e);
    }
    if (view) return Promise.resolve(view);
    let waiter!: Waiter;
    const waited = new Promise<Uint8Array>((resolve, reject) => {
      waiter = { length, resolve, reject };
    });
    this.waiters.push(waiter);
    return raceSignal(waited, signal, `pipe loan (the shared pool's ${this.bound} bytes are all lent: is the peer releasing the messages it read?)`, () => {
      const i = this.waiters.indexOf(waiter);
      if (i >= 0) this.waiters.splice(i, 1);
    });
  }

  /**
   * The place of `view` when it is a loan of this pool, which goes to the
   * peer now: the loan's buffer is detached and the slot is the peer's
   * until it releases it. undefined for any other memory.
   */
  send(view: Uint8Array): SlotPlace | undefined {
    const slot = this.byBuffer.get(view.buffer as ArrayBuffer);
    if (slot?.state !== "loaned") return undefined;
    const place: SlotPlace = {
      segment: slot.segment.id,
      fd: slot.segment.fd,
      offset: slot.offset + view.byteOffset,
      length: view.byteLength,
      slot: slot.index,
      generation: slot.generation,
    };
    this.lend(slot);
    slot.state = "sent";
    this.sent++;
    return place;
  }

  /** A loan of this pool that goes by copy after all (inline, or to an upstream peer): free again once the copy is done. */
  copied(view: Uint8Array): void {
    const slot = this.byBuffer.get(view.buffer as ArrayBuffer);
    if (slot?.state === "loaned") {
      this.lend(slot);
      this.free(slot);
    }
  }

  /** The peer released the slot `index` it got in `generation`; a protocol error for one it does not hold. */
  released(index: number, generation: number): void {
    const slot = this.slots[index];
    if (slot?.state !== "sent" || slot.generation !== generation) {
      throw new TensorPipeError(ErrorCode.PROTOCOL, `peer released pool slot ${index} (generation ${generation}), which it does not hold`, {
        where: "cma pool",
      });
    }
    this.sent--;
    slot.generation = (slot.generation + 1) >>> 0;
    this.free(slot);
  }

  /** Ends the pool: waiting loans reject with `error`; the memory goes with its last view. */
  close(error: Error): void {
    if (this.closedWith) return;
    this.closedWith = error;
    for (const w of this.waiters.splice(0)) w.reject(error);
    for (const s of this.segments) this.addon.closeSegment(s.id);
    this.segments.length = 0;
    this.slots.length = 0;
  }

  /** The loan's view goes out of the user's hands: no write of theirs reaches the slot from now on. */
  private lend(slot: Slot): void {
    this.unsent.unregister(slot);
    this.addon.detachBuffer(slot.buffer!);
    this.byBuffer.delete(slot.buffer!);
    slot.buffer = undefined;
  }

  private free(slot: Slot): void {
    slot.state = "free";
    slot.buffer = undefined;
    slot.segment.free++;
    this.serveWaiters();
  }

  private serveWaiters(): void {
    while (this.waiters.length > 0) {
      const view = this.tryLoan(this.waiters[0]!.length);
      if (!view) return;
      this.waiters.shift()!.resolve(view);
    }
  }

  /** A slot lent now, from a free one, a new segment, or room made by dropping segments wholly free; undefined when the pool is full. */
  private tryLoan(length: number): Uint8Array | undefined {
    const size = slotSizeFor(length);
    const slot = this.freeSlot(size) ?? this.grow(size);
    if (!slot) return undefined;
    slot.state = "loaned";
    slot.segment.free--;
    // Zero-length loans have no memory to map.
    const buffer = length === 0 ? new ArrayBuffer(0) : this.addon.viewSegment(slot.segment.id, slot.offset, length);
    slot.buffer = buffer;
    this.byBuffer.set(buffer, slot);
    this.unsent.register(buffer, slot, slot);
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
    const bytes = Math.max(size, SEGMENT_MIN);
    if (this.bytes + bytes > this.bound) this.dropIdle(this.bytes + bytes - this.bound);
    if (this.bytes + bytes > this.bound) return undefined;
    const [id, fd] = this.addon.createSegment(bytes);
    const segment: Segment = { id, fd, bytes, slotSize: size, free: bytes / size, slots: [] };
    for (let offset = 0; offset < bytes; offset += size) {
      const slot: Slot = { index: this.slots.length, segment, offset, generation: 0, state: "free", buffer: undefined };
      this.slots.push(slot);
      segment.slots.push(slot);
    }
    this.segments.push(segment);
    this.bytes += bytes;
    return segment.slots[0];
  }

  /** Drops segments of which no slot is lent, oldest first, until `needed` bytes are free. */
  private dropIdle(needed: number): void {
    for (let i = 0; i < this.segments.length && needed > 0; ) {
      const s = this.segments[i]!;
      if (s.free !== s.slots.length) {
        i++;
        continue;
      }
      this.segments.splice(i, 1);
      for (const slot of s.slots) this.slots[slot.index] = undefined;
      this.addon.closeSegment(s.id);
      this.bytes -= s.bytes;
      needed -= s.bytes;
    }
  }
}
