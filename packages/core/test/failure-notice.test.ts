/**
 * A peer's failure notice is its own words: shown, bounded and escaped, its
 * code one this side knows, and a DescriptorReply still read as one.
 */
import { describe, expect, it } from "vitest";
import { ErrorCode, TensorPipeError } from "../src/errors.js";
import { NopWriter } from "../src/nop/writer.js";
import { MAX_NOTICE_CHARS, decodeReplyFrame, encodeFailureNotice } from "../src/protocol/failure-notice.js";
import { encodeDescriptorReply } from "../src/protocol/message.js";

function notice(code: string, message: string): Uint8Array {
  const w = new NopWriter(64);
  w.structure(2).string(code).string(message);
  return w.finish();
}

describe("a failure notice", () => {
  it("round-trips this side's error, and leaves a DescriptorReply a DescriptorReply", () => {
    const sent = encodeFailureNotice(new TensorPipeError(ErrorCode.DATA_CORRUPTED, "a tensor of 4 bytes arrived changed"));
    expect(decodeReplyFrame(sent)).toEqual({ notice: { code: ErrorCode.DATA_CORRUPTED, message: "a tensor of 4 bytes arrived changed" } });
    const reply = encodeDescriptorReply({ targetDevices: [{ type: "cpu", index: 0 }] });
    expect(decodeReplyFrame(reply)).toEqual({ reply: { targetDevices: [{ type: "cpu", index: 0 }] } });
  });

  it("takes a code this side does not know as ERR_TP_PROTOCOL, escapes the peer's words, and keeps at most 1024 characters of them", () => {
    const got = decodeReplyFrame(notice("ERR_TP_EVERYTHING_IS_FINE", `ok\u001b[2J\n${"x".repeat(5000)}`));
    expect("notice" in got && got.notice.code).toBe(ErrorCode.PROTOCOL);
    const message = "notice" in got ? got.notice.message : "";
    expect(message.startsWith("ok\\x1b[2J\\x0axxx")).toBe(true);
    expect(message.length).toBeLessThanOrEqual(MAX_NOTICE_CHARS + 32);
  });

  it("refuses anything else with ERR_TP_PROTOCOL", () => {
    const w = new NopWriter(16);
    w.structure(3).string("a").string("b").string("c");
    expect(() => decodeReplyFrame(w.finish())).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
    expect(() => decodeReplyFrame(notice("ERR_TP_SYSTEM", "x").subarray(0, 5))).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
  });
});
