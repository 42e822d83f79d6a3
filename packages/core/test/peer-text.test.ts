import { describe, expect, it } from "vitest";
import { peerExcerpt, peerText } from "../src/peer-text.js";

describe("peerText", () => {
  it("returns plain text within its bound as it was", () => {
    const plain = "descriptors do not match: pid namespaces differ";
    expect(peerText(plain)).toBe(plain);
  });

  it("escapes controls, separators, bidi overrides and invisible marks, and replaces a lone surrogate", () => {
    expect(peerText("a\u001b[2Jb\nc\u2028d\u202ee\u200bf\ufeffg\u0085h\ud800i")).toBe("a\\x1b[2Jb\\x0ac\\u2028d\\u202ee\\u200bf\\ufeffg\\x85h\ufffdi");
  });

  it("is at most `max` characters with what it says of the cut, and never half an escape or a surrogate pair", () => {
    for (const unit of ["x", "\u001b", "\u2028", "\ud83d\ude00"]) {
      for (let max = 24; max < 60; max++) {
        const out = peerText(unit.repeat(100), max);
        expect(out.length, `${JSON.stringify(unit)} at ${max}`).toBeLessThanOrEqual(max);
        expect(out).toMatch(new RegExp(`\\.\\.\\. \\(${unit.length * 100} characters\\)$`));
        const kept = out.slice(0, out.lastIndexOf("..."));
        expect(kept).toMatch(/^(x*|(\\x1b)*|(\\u2028)*|(\ud83d\ude00)*)$/);
      }
    }
  });

  it("leaves what it made as it is: made safe once, not cut again", () => {
    for (const value of ["\u001b".repeat(500), "y".repeat(5000), "ok"]) {
      const once = peerText(value, 128);
      expect(peerText(once, 128)).toBe(once);
      expect(peerExcerpt(once)).toBe(once);
    }
  });
});
