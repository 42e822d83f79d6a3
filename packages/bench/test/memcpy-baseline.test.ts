import { afterAll, describe, expect, it } from "vitest";
import { ParallelMemcpy } from "../src/memcpy-baseline.js";

describe("memcpy baseline on the best number of threads", () => {
  const copier = new ParallelMemcpy(3);
  afterAll(() => copier.close());

  it("copies every byte, whatever the threads' slices (a size that 3 x 4 KiB does not divide)", async () => {
    const size = ParallelMemcpy.SPLIT_FROM * 3 + 12_345;
    const data = new Uint8Array(size);
    for (let i = 0; i < size; i++) data[i] = (i * 31 + 7) & 0xff;
    const gbps = await copier.throughput(data, 2);
    expect(Number.isFinite(gbps) && gbps > 0).toBe(true);
    expect(Buffer.compare(copier.destination().subarray(0, size), data)).toBe(0);
  });

  it("copies every byte on the threads it is told, and refuses more than it has", async () => {
    const data = new Uint8Array(ParallelMemcpy.SPLIT_FROM + 4097);
    for (let i = 0; i < data.length; i++) data[i] = (i * 13 + 1) & 0xff;
    expect(await copier.throughputOn(3, data, 1)).toBeGreaterThan(0);
    expect(Buffer.compare(copier.destination().subarray(0, data.length), data)).toBe(0);
    await expect(copier.throughputOn(4, data, 1)).rejects.toThrow("threads must be from 1 to 3, got 4");
    await expect(copier.throughputOn(0, data, 1)).rejects.toThrow("got 0");
  });

  it("copies small buffers on this thread", async () => {
    const data = new Uint8Array(100).fill(9);
    expect(await copier.throughput(data, 2)).toBeGreaterThan(0);
    expect(
      copier
        .destination()
        .subarray(0, 100)
        .every((b) => b === 9),
    ).toBe(true);
  });
});
