import { describe, expect, it } from "vitest";
import { NopReader } from "../src/nop/reader.js";
import { NopWriter } from "../src/nop/writer.js";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");

describe("libnop integers", () => {
  it.each([
    [0, "00"],
    [127, "7f"],
    [128, "8080"],
    [255, "80ff"],
    [256, "810001"],
    [65535, "81ffff"],
    [65536, "8200000100"],
    [2 ** 32, "830000000001000000"],
  ])("unsigned %d uses the smallest form", (v, expected) => {
    const bytes = new NopWriter().uint(v).finish();
    expect(hex(bytes)).toBe(expected);
    expect(new NopReader(bytes).uint()).toBe(v);
  });

  it.each([
    [0, "00"],
    [127, "7f"],
    [-1, "ff"],
    [-64, "c0"],
    [-65, "84bf"],
    [128, "858000"],
    [-129, "857fff"],
    [40000, "86409c0000"],
    [-(2 ** 31), "8600000080"],
    [2 ** 31, "870000008000000000"],
  ])("signed %d uses the smallest form", (v, expected) => {
    const bytes = new NopWriter().int(v).finish();
    expect(hex(bytes)).toBe(expected);
    expect(new NopReader(bytes).int(64)).toBe(v);
  });

  it("rejects a form wider than the field", () => {
    expect(() => new NopReader(Uint8Array.from([0x82, 0, 0, 1, 0])).uint(16)).toThrow(/32-bit integer/);
    expect(() => new NopReader(Uint8Array.from([0x86, 0, 0, 1, 0])).int(16)).toThrow(/32-bit integer/);
  });

  it("round-trips strings with multi-byte characters and vectors of u64", () => {
    const bytes = new NopWriter()
      .string("héllo ✓")
      .u64Vector([1, 2 ** 40, 2n ** 64n - 1n])
      .finish();
    const r = new NopReader(bytes);
    expect(r.string()).toBe("héllo ✓");
    expect(r.u64Vector()).toEqual([1n, 2n ** 40n, 2n ** 64n - 1n]);
    r.end();
  });

  // The string prefix (0xbd), the length in its smallest form, the UTF-8 bytes: as TextEncoder makes them.
  const stringBytes = (text: string) => {
    const utf8 = new TextEncoder().encode(text);
    return hex(Uint8Array.of(0xbd)) + hex(new NopWriter().uint(utf8.length).finish()) + hex(utf8);
  };

  it.each([
    ["one ASCII character", "x"],
    ["127 ASCII characters", "a".repeat(127)],
    ["128 ASCII characters, whose length takes two bytes", "b".repeat(128)],
    ["ASCII up to a multi-byte character", "sink é"],
    ["a multi-byte character first", "é"],
    ["a character outside the BMP", "x😀"],
  ])("encodes %s as UTF-8 after its length", (_what, text) => {
    const w = new NopWriter(4);
    // A frame written before leaves bytes behind in the reused memory.
    w.reset().string("z".repeat(200)).finish();
    const bytes = w.reset().string(text).finish();
    expect(hex(bytes)).toBe(stringBytes(text));
    expect(new NopReader(bytes).string()).toBe(text);
  });

  it.each([
    ["16 ASCII bytes", "0123456789abcdef"],
    ["17 ASCII bytes", "0123456789abcdefg"],
    ["a short string with a multi-byte character", "ab✓"],
  ])("decodes %s", (_what, text) => {
    const r = new NopReader(new NopWriter().string(text).uint(7).finish());
    expect(r.string()).toBe(text);
    expect(r.uint()).toBe(7);
  });

  it("refuses a short string that is not UTF-8", () => {
    expect(() => new NopReader(Uint8Array.of(0xbd, 3, 0x61, 0xff, 0x62)).string()).toThrow(/not valid UTF-8/);
  });

  it("grows its buffer for large values", () => {
    const s = "x".repeat(100_000);
    expect(new NopReader(new NopWriter(4).string(s).finish()).string()).toBe(s);
  });
});

describe("a NopWriter reused frame after frame", () => {
  it("writes into the same memory, and the same view while the length holds", () => {
    const w = new NopWriter(16);
    const first = w.reset().uint(1).string("ab").finish();
    const second = w.reset().uint(2).string("cd").finish();
    expect(second).toBe(first);
    expect(hex(second)).toBe("02bd026364");
    expect(w.reset().uint(3).finish()).toHaveLength(1);
  });

  it("leaves a held frame as it was: the next one goes into fresh memory", () => {
    const w = new NopWriter(16);
    const held = w.reset().uint(1).string("ab").finish();
    w.hold();
    const next = w.reset().uint(2).string("cd").finish();
    expect(hex(held)).toBe("01bd026162");
    expect(hex(next)).toBe("02bd026364");
    expect(next.buffer === held.buffer && next.byteOffset === held.byteOffset).toBe(false);
  });
});
