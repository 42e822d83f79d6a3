/**
 * 10^4 connect/write/close cycles per transport leave file descriptors,
 * shared-memory mappings and native memory where they started.
 * LEAK_CYCLES scales it.
 */
import { readFileSync, readdirSync } from "node:fs";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { Connection, TransportContext } from "@tensorpipe/core/backend";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { describe, expect, it } from "vitest";

const CYCLES = Number(process.env.LEAK_CYCLES ?? 10_000);
const fds = () => readdirSync("/proc/self/fd").length;
const shmMaps = () =>
  readFileSync("/proc/self/maps", "utf8")
    .split("\n")
    .filter((l) => l.includes("tensorpipe-js-shm")).length;
const rssMiB = () => process.memoryUsage().rss / 2 ** 20;
setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
/** Live JS heap after full collections: what closed connections still hold. */
const heapMiB = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed / 2 ** 20;
};

describe.each([
  ["uv", () => new UvTransport(), "127.0.0.1:0"],
  ["shm", () => new ShmTransport({ ringSize: 64 * 1024 }), "*"],
] as const)("leaks over %s", (_, create, address) => {
  it(`${CYCLES} connect/write/read/close cycles`, async () => {
    const transport: TransportContext = create();
    const accepted: Connection[] = [];
    let arrived: () => void = () => undefined;
    const listener = await transport.listen(address, (c) => {
      accepted.push(c);
      arrived();
    });
    const payload = new Uint8Array(1000).fill(7);
    const cycle = async () => {
      const waiting = new Promise<void>((r) => (arrived = r));
      const c = await transport.connect(listener.address());
      if (accepted.length === 0) await waiting;
      const s = accepted.pop()!;
      await c.write([payload]);
      expect((await s.read(4096)).byteLength).toBe(1000);
      c.close();
      s.close();
    };
    for (let i = 0; i < 200; i++) await cycle();
    await new Promise((r) => setTimeout(r, 50));
    const before = { fds: fds(), maps: shmMaps(), rss: rssMiB(), heap: heapMiB() };
    for (let i = 0; i < CYCLES; i++) await cycle();
    await expect.poll(fds, { timeout: 5000 }).toBe(before.fds);
    await expect.poll(shmMaps, { timeout: 5000 }).toBe(before.maps);
    // Native memory: what 10^4 leaked connections would hold (a 64 KiB
    // buffer or two rings each) is far above this bound; their JS objects
    // (a few KiB each) far above the heap's.
    await new Promise((r) => setTimeout(r, 100));
    expect(heapMiB() - before.heap).toBeLessThan(8);
    expect(rssMiB() - before.rss).toBeLessThan(200);
    listener.close();
    await transport.close();
  });
});
