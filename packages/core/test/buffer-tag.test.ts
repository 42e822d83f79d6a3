/** Records kept on ArrayBuffers (loans, lent views): per tag, unseen by users, one shape for every buffer marked. */
import v8 from "node:v8";
import { describe, expect, it } from "vitest";
import { bufferTag } from "../src/buffer-tag.js";

v8.setFlagsFromString("--allow-natives-syntax");
const sameMap = new Function("a", "b", "return %HaveSameMap(a, b)") as (a: object, b: object) => boolean;

describe("bufferTag", () => {
  it("keeps a record per tag on a buffer, that the buffer's users do not see", () => {
    const loans = bufferTag<string>();
    const views = bufferTag<number>();
    const buffer = new ArrayBuffer(8);
    expect(loans.get(buffer)).toBeUndefined();
    loans.set(buffer, "lent");
    expect([loans.get(buffer), views.get(buffer)]).toEqual(["lent", undefined]);
    views.set(buffer, 1);
    loans.set(buffer, "written");
    expect([loans.get(buffer), views.get(buffer)]).toEqual(["written", 1]);
    expect(loans.get(new ArrayBuffer(8))).toBeUndefined();
    expect([Object.keys(buffer), Object.getOwnPropertySymbols(buffer), JSON.stringify(buffer)]).toEqual([[], [], "{}"]);
  });

  it("gives every buffer marked by one tag one shape", () => {
    const tag = bufferTag<object>();
    const a = new ArrayBuffer(8);
    const b = new ArrayBuffer(1 << 20);
    tag.set(a, {});
    tag.set(b, {});
    expect(sameMap(a, b)).toBe(true);
  });
});
