import { describe, expect, it } from "vitest";
import { CPU_DEVICE } from "../src/device.js";
import type { Descriptor } from "../src/message.js";
import { IncomingMemory, allocateMessage } from "../src/message-memory.js";

const descriptor = (payloads: number[], tensors: number[], target = CPU_DEVICE): Descriptor => ({
  metadata: "",
  payloads: payloads.map((length) => ({ length, metadata: "" })),
  tensors: tensors.map((length) => ({ length, sourceDevice: CPU_DEVICE, targetDevice: target, metadata: "" })),
});

describe("allocateMessage", () => {
  it("carves every part from one buffer, each of its length, 64-byte aligned and apart from the others", () => {
    const m = allocateMessage(descriptor([3, 0], [5, 64, 1]));
    const parts = [...m.payloads.map((p) => p.data), ...m.tensors.map((t) => t.buffer)];
    expect(parts.map((p) => p.byteLength)).toEqual([3, 0, 5, 64, 1]);
    for (const p of parts) {
      expect(p.buffer).toBe(m.memory);
      expect(p.byteOffset % 64).toBe(0);
    }
    for (const p of parts) p.fill(0xff);
    // A Float64Array views any tensor whose length is whole elements.
    expect(new Float64Array(m.tensors[1]!.buffer.buffer, m.tensors[1]!.buffer.byteOffset, 8)[0]).toBeNaN();
    m.tensors[0]!.buffer.fill(1);
    expect(m.tensors[1]!.buffer.every((b) => b === 0xff)).toBe(true);
  });

  it("reuses a buffer that is large enough, and makes a fresh one otherwise", () => {
    const first = allocateMessage(descriptor([100], []));
    expect(allocateMessage(descriptor([], [64]), first.memory).memory).toBe(first.memory);
    expect(allocateMessage(descriptor([], [1000]), first.memory).memory).not.toBe(first.memory);
  });

  it("costs no memory for what is only announced: 2 GiB of 128 KiB tensors", () => {
    const before = process.memoryUsage().rss;
    const m = allocateMessage(
      descriptor(
        [],
        Array.from({ length: 16_384 }, () => 128 << 10),
      ),
    );
    expect(m.memory.byteLength).toBe(2 ** 31);
    expect(process.memoryUsage().rss - before).toBeLessThan(64 << 20);
  });

  it("refuses a tensor sent to another device, saying what to use instead", () => {
    expect(() => allocateMessage(descriptor([], [8], { type: "cuda", index: 0 }))).toThrow(
      expect.objectContaining({ code: "ERR_TP_INVALID_ARG", message: expect.stringMatching(/tensor 0 targets cuda:0: use readDescriptor\(\) and read\(\)/) }),
    );
  });
});

describe("IncomingMemory", () => {
  it("gives each empty part a buffer of its own: one a user detaches leaves the next messages alone", () => {
    const first = new IncomingMemory(descriptor([0], [0]));
    const empty = first.payload(0, 0);
    structuredClone(empty.buffer, { transfer: [empty.buffer] });
    expect(empty.buffer.byteLength).toBe(0);
    const next = new IncomingMemory(descriptor([0, 5], [0]));
    expect([next.payload(0, 0).byteLength, next.payload(1, 5).byteLength, next.tensor(0, 0).byteLength]).toEqual([0, 5, 0]);
  });
});
