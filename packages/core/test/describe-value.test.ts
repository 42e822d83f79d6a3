import { describe, expect, it } from "vitest";
import { describeValue } from "../src/describe-value.js";

describe("describeValue", () => {
  it.each([
    [undefined, "undefined"],
    [null, "null"],
    ["10", 'the string "10"'],
    ["x".repeat(40), `the string "${"x".repeat(32)}..."`],
    [Number.NaN, "number NaN"],
    [5n, "bigint 5"],
    [true, "boolean true"],
    [() => 1, "a function"],
    [Symbol("s"), "a symbol"],
    [[1, 2], "an Array"],
    [new ArrayBuffer(4), "an ArrayBuffer"],
    [new SharedArrayBuffer(4), "a SharedArrayBuffer"],
    [{}, "an object (no keys)"],
    [{ data: 1, length: 2 }, "an object (data, length)"],
    [Object.create(null), "an object (no keys)"],
    [new Map(), "an instance of Map"],
    [new Float32Array(1), "an instance of Float32Array"],
  ])("says what %s is", (value, said) => {
    expect(describeValue(value)).toBe(said);
  });
});
