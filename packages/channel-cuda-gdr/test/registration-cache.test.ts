import { describe, expect, it } from "vitest";
import { type Allocation, RegistrationCache } from "../src/registration-cache.js";

/** Registers nothing: records what the cache asks of the NIC (no RDMA device here). */
function recordingRegistrar() {
  const live = new Map<number, { base: bigint; size: number }>();
  const log: string[] = [];
  let next = 1;
  return {
    live,
    log,
    register(base: bigint, size: number) {
      const id = next++;
      live.set(id, { base, size });
      log.push(`reg ${id}`);
      return { id, lkey: 1000 + id };
    },
    deregister(id: number) {
      if (!live.delete(id)) throw new Error(`deregistered ${id} twice or never registered`);
      log.push(`dereg ${id}`);
    },
  };
}

const alloc = (base: number, size: number, bufferId: number): Allocation => ({ base: BigInt(base), size, bufferId: BigInt(bufferId) });

describe("registration cache", () => {
  it("registers each allocation once, however many transfers use it", () => {
    const r = recordingRegistrar();
    const cache = new RegistrationCache(r);
    const a = alloc(0x1000, 4096, 1);
    const held = [cache.acquire(a), cache.acquire(a), cache.acquire(a)];
    expect(new Set(held.map((h) => h.lkey))).toEqual(new Set([1001]));
    held.forEach((h) => h.release());
    cache.acquire(a).release();
    expect(r.log).toEqual(["reg 1"]);
    expect(cache.size).toBe(1);
  });

  it("drops a registration whose memory was freed and reallocated at the same address", () => {
    const r = recordingRegistrar();
    const cache = new RegistrationCache(r);
    cache.acquire(alloc(0x1000, 8192, 1)).release();
    // A new allocation (new buffer id) overlapping the old one's range.
    const held = cache.acquire(alloc(0x2000, 4096, 2));
    expect(held.lkey).toBe(1002);
    expect(r.log).toEqual(["reg 1", "dereg 1", "reg 2"]);
    expect([...r.live.keys()]).toEqual([2]);
  });

  it("evicts the least recently used registration nobody holds, never one in use", () => {
    const r = recordingRegistrar();
    const cache = new RegistrationCache(r, 2);
    const a = cache.acquire(alloc(0x10000, 16, 1));
    cache.acquire(alloc(0x20000, 16, 2)).release();
    cache.acquire(alloc(0x30000, 16, 3)).release();
    // 1 is held, so 2 (least recent of the free ones) went.
    expect(r.log).toEqual(["reg 1", "reg 2", "dereg 2", "reg 3"]);
    a.release();
    cache.acquire(alloc(0x30000, 16, 3)).release();
    cache.acquire(alloc(0x40000, 16, 4)).release();
    expect(r.log.slice(4)).toEqual(["dereg 1", "reg 4"]);
    expect(cache.size).toBe(2);
  });

  it("goes over capacity rather than stall when every registration is held", () => {
    const r = recordingRegistrar();
    const cache = new RegistrationCache(r, 1);
    const held = [cache.acquire(alloc(0x1000, 16, 1)), cache.acquire(alloc(0x2000, 16, 2))];
    expect(r.live.size).toBe(2);
    held.forEach((h) => h.release());
  });

  it("deregisters an evicted or cleared registration only once its last holder releases it", () => {
    const r = recordingRegistrar();
    const cache = new RegistrationCache(r);
    const held = cache.acquire(alloc(0x1000, 4096, 1));
    cache.acquire(alloc(0x1000, 4096, 2)).release();
    expect(r.live.has(1)).toBe(true);
    held.release();
    held.release();
    expect(r.live.has(1)).toBe(false);
    const again = cache.acquire(alloc(0x9000, 16, 3));
    cache.clear();
    expect(r.live.has(3)).toBe(true);
    again.release();
    expect(r.live.size).toBe(0);
  });
});
