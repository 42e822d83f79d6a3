/**
 * Memory registrations of one NIC, one per GPU allocation: registering
 * pins the allocation and maps it into the NIC, which costs far more than
 * sending it, so it is done once and kept. An allocation is known by the
 * driver's buffer id, which a new allocation at a freed one's address does
 * not reuse: a registration overlapping a new allocation is stale (its
 * memory was freed) and is dropped first. At most `capacity` are kept;
 * the least recently used one that no transfer holds goes first.
 */

/** The allocation a tensor lies in. */
export interface Allocation {
  /** The allocation's first byte. */
  base: bigint;
  /** Its bytes. */
  size: number;
  /** The driver's id of the allocation (a new allocation at a freed one's address has another). */
  bufferId: bigint;
}

/** What registers and deregisters memory on the NIC. */
export interface Registrar {
  /** Registers [base, base + size) with the NIC. */
  register(
    base: bigint,
    size: number,
  ): {
    /** The registration, for deregister(). */
    id: number;
    /** The local key work requests name it by. */
    lkey: number;
  };
  /** Undoes register(). */
  deregister(id: number): void;
}

interface Entry {
  allocation: Allocation;
  id: number;
  lkey: number;
  holders: number;
}

/** A registration held for one transfer; release it once the transfer is over. */
export interface HeldRegistration {
  /** The local key work requests name it by. */
  readonly lkey: number;
  /** Lets the cache deregister it once nobody holds it. */
  release(): void;
}

/** Memory registrations by allocation, kept while allocations live and shared by the transfers that use them. */
export class RegistrationCache {
  /** By buffer id; Map order is use order, least recent first. */
  private readonly entries = new Map<bigint, Entry>();

  constructor(
    private readonly registrar: Registrar,
    private readonly capacity = 256,
  ) {}

  /** Registrations held. */
  get size(): number {
    return this.entries.size;
  }

  /** The registration of `allocation`, made on first use. */
  acquire(allocation: Allocation): HeldRegistration {
    let entry = this.entries.get(allocation.bufferId);
    if (entry) {
      this.entries.delete(allocation.bufferId);
    } else {
      this.dropOverlapping(allocation);
      this.makeRoom();
      const { id, lkey } = this.registrar.register(allocation.base, allocation.size);
      entry = { allocation, id, lkey, holders: 0 };
    }
    this.entries.set(allocation.bufferId, entry);
    entry.holders++;
    const held = entry;
    let released = false;
    return {
      lkey: held.lkey,
      release: () => {
        if (released) return;
        released = true;
        held.holders--;
        if (held.holders === 0 && this.entries.get(held.allocation.bufferId) !== held) this.registrar.deregister(held.id);
      },
    };
  }

  /** Deregisters everything; registrations still held are deregistered when released. */
  clear(): void {
    for (const entry of this.entries.values()) if (entry.holders === 0) this.registrar.deregister(entry.id);
    this.entries.clear();
  }

  private dropOverlapping(a: Allocation): void {
    const end = a.base + BigInt(a.size);
    for (const [key, e] of this.entries) {
      const eEnd = e.allocation.base + BigInt(e.allocation.size);
      if (e.allocation.base < end && a.base < eEnd) this.evict(key, e);
    }
  }

  private makeRoom(): void {
    if (this.entries.size < this.capacity) return;
    for (const [key, e] of this.entries) {
      if (e.holders === 0) {
        this.evict(key, e);
        return;
      }
    }
    // Every registration is in use: go over capacity rather than stall.
  }

  /** Out of the cache; deregistered now, or by its last holder. */
  private evict(key: bigint, e: Entry): void {
    this.entries.delete(key);
    if (e.holders === 0) this.registrar.deregister(e.id);
  }
}
