import { ErrorCode } from "@tensorpipe/core";
import { describe, expect, it } from "vitest";
import { describeNegotiationConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "@tensorpipe/transport-uv";
import { MPT_PRIORITY, MptChannelContext } from "../src/index.js";

describeNegotiationConformance({
  kind: "channel",
  name: "mpt",
  create: () => new MptChannelContext(),
  priority: MPT_PRIORITY,
  transport: { name: "uv", create: () => new UvTransport(), listenUrl: "uv://127.0.0.1:0" },
});

describe("mpt options", () => {
  it.each([
    ["maxChunk", { maxChunk: 300000.5 }, /MptChannelOptions\.maxChunk must be a whole number from 1 to \d+, got number 300000\.5/],
    ["maxChunk", { maxChunk: Number.NaN }, /maxChunk must be .*got number NaN/],
    ["lanes", { lanes: 0 }, /MptChannelOptions\.lanes must be a whole number from 1 to 64, got number 0/],
    ["lanes", { lanes: 65 }, /lanes must be a whole number from 1 to 64/],
    ["minSplit", { minSplit: "1M" }, /minSplit must be .*got the string "1M"/],
    ["threads", { threads: "yes" }, /threads must be true or false, got the string "yes"/],
  ])("refuse a bad %s with ERR_TP_INVALID_ARG saying what it takes", (_, options, text) => {
    expect(() => new MptChannelContext(options as never)).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(text) }),
    );
  });
});
