/**
 * A peer's path report is its own text: shown, never acted on, and held to
 * what a report can be whatever the peer sends.
 */
import { describe, expect, it } from "vitest";
import { PATH_REPORT_ENTRY, putReport, readExtensions } from "../src/handshake/extensions.js";
import { MAX_REPORT_CHARS, MAX_VERDICTS, boundedVerdicts, fromPeer, peerReport, reportJson } from "../src/path-report.js";
import type { DeviceDescriptors } from "../src/protocol/handshake.js";

/** A report as a peer's entry carries it, read back as the handshake reads it. */
function entry(descriptor: string): string | undefined {
  return readExtensions(new Map([[PATH_REPORT_ENTRY, new Map([["report:0", { device: { type: "report", index: 0 }, descriptor }]])]])).report;
}

describe("a peer's path report", () => {
  it("round-trips what this side sends", () => {
    const verdicts = [{ kind: "channel", name: "cma", pair: "cpu:0->cpu:0", by: "here", outcome: "chosen", reason: "chosen (priority 1200)" }] as const;
    const sent = new Map<string, DeviceDescriptors>();
    putReport(sent, reportJson({ transports: ["uv"], channels: ["cma"] }, verdicts));
    expect(peerReport(readExtensions(sent).report)).toEqual({ offered: { transports: ["uv"], channels: ["cma"] }, verdicts });
  });

  it("is absent when the peer sent none, or sent something that is not a report", () => {
    expect(peerReport(readExtensions(new Map()).report)).toBeUndefined();
    expect(peerReport(entry("{not json"))).toBeUndefined();
    expect(peerReport(entry("42"))).toBeUndefined();
  });

  it("keeps only well-formed verdicts, bounded in count and characters, control characters escaped", () => {
    const junk = [
      { kind: "channel", name: "x", by: "here", outcome: "rm -rf", reason: "unknown outcome" },
      { kind: "disk", name: "x", by: "here", outcome: "chosen", reason: "unknown kind" },
      { kind: "channel", name: 7, by: "here", outcome: "chosen", reason: "name not a string" },
      { kind: "channel", name: "x", by: "inferred", outcome: "chosen", reason: "a peer infers nothing of its own side" },
      null,
    ];
    const good = (i: number) => ({ kind: "transport", name: `uv${i}\u001b[31m`, by: "here", outcome: "not viable", reason: "r".repeat(1100) });
    const many = Array.from({ length: 25 }, (_, i) => good(i));
    const got = peerReport(entry(JSON.stringify({ offered: { transports: "uv", channels: [1, "basic"] }, verdicts: [...junk, ...many] })))!;
    expect(got.offered).toEqual({ transports: [], channels: ["basic"] });
    expect(got.verdicts[0]).toEqual({
      kind: "transport",
      name: "uv0\\x1b[31m",
      by: "here",
      outcome: "not viable",
      reason: `${"r".repeat(1024 - 21)}... (1100 characters)`,
    });
    expect(got.verdicts.length).toBeLessThanOrEqual(MAX_VERDICTS);
    const chars = got.verdicts.reduce((n, v) => n + v.name.length + v.reason.length, 0);
    // Past the bound the rest is not looked at: the verdict that crossed it is the last.
    expect(chars).toBeLessThan(MAX_REPORT_CHARS + 1200);
    expect(got.verdicts.length).toBeLessThan(many.length);
  });

  it("is not parsed past 32 KiB: a longer one is none of ours, and says so in one verdict", () => {
    const verdicts = Array.from({ length: 470 }, (_, i) => ({ kind: "channel", name: `c${i}`, by: "here", outcome: "not viable", reason: "why ".repeat(500) }));
    const got = peerReport(entry(JSON.stringify({ offered: { transports: ["uv"], channels: ["basic"] }, verdicts })))!;
    expect(got.verdicts).toEqual([
      expect.objectContaining({ name: "(its report)", reason: expect.stringMatching(/^the peer's report was \d+ characters, over 32768: not read$/) }),
    ]);
  });

  it("escapes what could forge a line or hide text, and never leaves half a character", () => {
    const hostile = `a\u0085b\u2028c\u202ed\u200be\ufefff\ud800g${"\ud83d\ude00".repeat(600)}`;
    const got = peerReport(entry(JSON.stringify({ verdicts: [{ kind: "channel", name: hostile, by: "here", outcome: "chosen", reason: "r" }] })))!;
    const name = got.verdicts[0]!.name;
    expect(name.startsWith("a\\x85b\\u2028c\\u202ed\\u200be\\ufefff\\ud800g")).toBe(true);
    expect(name).toMatch(/\.\.\. \(1213 characters\)$/);
    expect(name).not.toMatch(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/);
  });

  it("drops a peer's repeats", () => {
    const v = { kind: "transport", name: "uv", by: "here", outcome: "chosen", reason: "r" };
    expect(peerReport(entry(JSON.stringify({ verdicts: [v, v, { ...v, reason: "again" }] })))!.verdicts).toEqual([v]);
  });

  it("is told from this side: the peer's 'here' is 'there', its pairs reversed, its words on this side dropped", () => {
    expect(
      fromPeer([
        { kind: "channel", name: "cuda-basic", pair: "cuda:0->cpu:0", by: "here", outcome: "chosen", reason: "chosen" },
        { kind: "channel", name: "cma", by: "there", outcome: "not offered", reason: "the peer does not offer it" },
      ]),
    ).toEqual([{ kind: "channel", name: "cuda-basic", pair: "cpu:0->cuda:0", by: "there", outcome: "chosen", reason: "chosen" }]);
    expect(fromPeer([{ kind: "channel", name: "x", by: "here", outcome: "not viable", reason: "not viable here: no GPU" }])[0]!.reason).toBe(
      "not viable there: no GPU",
    );
    expect(
      fromPeer([{ kind: "transport", name: "shm", by: "here", outcome: "descriptors differ", reason: 'domains differ ("a" here, "b" there): why' }])[0]!.reason,
    ).toBe('domains differ ("b" here, "a" there): why');
    // Quotes the peer put in its words change places no worse.
    const crafted = `descriptors do not match ("${'" here, "'.repeat(40)}" here, "x" there)`;
    expect(fromPeer([{ kind: "channel", name: "c", by: "here", outcome: "descriptors differ", reason: crafted }])[0]!.reason).toMatch(
      /^descriptors do not match \("/,
    );
  });
});

describe("a pipe's path report", () => {
  it("keeps what was chosen and at most 64 verdicts of 8192 characters, counting the rest", () => {
    const chosen = { kind: "channel", name: "basic", pair: "cpu:0->cpu:0", by: "here", outcome: "chosen", reason: "chosen (priority 100)" } as const;
    const other = (i: number) => ({ kind: "channel", name: `c${i}`, by: "there", outcome: "not viable", reason: "x".repeat(500) }) as const;
    const kept = boundedVerdicts([...Array.from({ length: 100 }, (_, i) => other(i)), chosen]);
    expect(kept).toContainEqual(chosen);
    expect(kept.length).toBeLessThanOrEqual(MAX_VERDICTS);
    expect(kept.reduce((n, v) => n + v.name.length + (v.pair?.length ?? 0) + v.reason.length, 0)).toBeLessThanOrEqual(MAX_REPORT_CHARS);
    expect(kept.at(-1)).toMatchObject({ name: expect.stringMatching(/^\(\d+ more\)$/), reason: expect.stringMatching(/more verdicts, not kept/) });
    expect(boundedVerdicts([chosen])).toEqual([chosen]);
  });
});
