import { describe, expect, it } from "vitest";
import { peerExcerpt, peerText, safeText } from "../src/peer-text.js";

describe("peerText", () => {
  it("returns plain words within its bound as they were", () => {
    const plain = "descriptors do not match: pid namespaces differ";
    expect(peerText(plain)).toBe(plain);
  });

  it("escapes controls, separators, bidi overrides, invisible and tag characters, a lone surrogate, quotes and backslashes", () => {
    expect(peerText("a\u001b[2Jb\nc\u2028d\u202ee\u200bf\ufeffg\u0085h\ud800i")).toBe("a\\x1b[2Jb\\x0ac\\u2028d\\u202ee\\u200bf\\ufeffg\\x85h\\ud800i");
    // Soft hyphen, tag characters (text smuggled unseen), fillers, a joiner and a selector.
    expect(peerText("\u00ad\u{e0041}\u{e0042}\u180e\u115f\u3164\u034f\ufe0f")).toBe("\\xad\\u{e0041}\\u{e0042}\\u180e\\u115f\\u3164\\u034f\\ufe0f");
    expect(peerText('say "x" \\x1b')).toBe('say \\"x\\" \\\\x1b');
    // What renders: letters of any script, emoji.
    expect(peerText("Grüße, 名前 😀")).toBe("Grüße, 名前 😀");
  });

  it("is at most `max` characters with what it says of the cut, and never half an escape or a surrogate pair", () => {
    for (const unit of ["x", "\u001b", "\u2028", "\ud83d\ude00", "\u{e0041}", '"']) {
      for (let max = 24; max < 60; max++) {
        const out = peerText(unit.repeat(100), max);
        expect(out.length, `${JSON.stringify(unit)} at ${max}`).toBeLessThanOrEqual(max);
        expect(out).toMatch(new RegExp(`\\.\\.\\. \\(${unit.length * 100} characters\\)$`));
        const kept = out.slice(0, out.lastIndexOf("..."));
        expect(kept).toMatch(/^(x*|(\\x1b)*|(\\u2028)*|(\ud83d\ude00)*|(\\u\{e0041\})*|(\\")*)$/);
      }
    }
  });

  it("quotes an excerpt, which its words cannot leave", () => {
    expect(peerExcerpt('a" forged "b')).toBe('"a\\" forged \\"b"');
  });
});

describe("safeText", () => {
  it("escapes what hides or breaks a line, and leaves what peerText made, or itself made, as it is", () => {
    expect(safeText("a\u001bb\u{e0041}", 100)).toBe("a\\x1bb\\u{e0041}");
    for (const value of ["\u001b".repeat(500), "y".repeat(5000), 'say "x"', "ok"]) {
      const once = peerText(value, 128);
      expect(safeText(once, 128)).toBe(once);
      const shown = safeText(value, 128);
      expect(safeText(shown, 128)).toBe(shown);
    }
  });
});
