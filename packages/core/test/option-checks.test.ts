import { describe, expect, it } from "vitest";
import { ErrorCode } from "../src/errors.js";
import { OptionChecks } from "../src/option-checks.js";

describe("OptionChecks", () => {
  const check = new OptionChecks("ThingOptions");
  const refused = (message: string) => expect.objectContaining({ code: ErrorCode.INVALID_ARG, message });

  it("passes undefined through and takes what each check takes", () => {
    expect(check.wholeNumber("n", undefined, 1)).toBeUndefined();
    expect(check.wholeNumber("n", 3, 1, 5)).toBe(3);
    expect(check.number("x", 0.5, 0, 1)).toBe(0.5);
    expect(check.boolean("b", false)).toBe(false);
    expect(check.string("s", "eth0")).toBe("eth0");
    expect(check.oneOf("f", 6, [4, 6])).toBe(6);
    expect(check.limit("m", Infinity)).toBe(Infinity);
    expect(check.limit("m", 3)).toBe(3);
    expect(() => check.object(undefined)).not.toThrow();
  });

  it.each([
    [() => check.wholeNumber("n", 1.5, 1, 5), "ThingOptions.n must be a whole number from 1 to 5, got number 1.5"],
    [() => check.wholeNumber("n", "3", 1, 5, "ms"), 'ThingOptions.n must be a whole number of ms from 1 to 5, got the string "3"'],
    [() => check.number("x", Number.NaN, 0, 1), "ThingOptions.x must be a number from 0 to 1, got number NaN"],
    [() => check.boolean("b", "false"), 'ThingOptions.b must be true or false, got the string "false"'],
    [() => check.string("s", ""), 'ThingOptions.s must be a non-empty string, got the string ""'],
    [() => check.oneOf("f", "4", [4, 6]), 'ThingOptions.f must be one of 4, 6, got the string "4"'],
    [() => check.object([]), "ThingOptions must be an object, got an Array"],
    [() => check.limit("m", 0), "ThingOptions.m must be a positive integer or Infinity, got number 0"],
  ])("refuses, saying what the option takes and what it got: %#", (call, message) => {
    expect(call).toThrow(refused(message));
  });
});
