import { describeChannelConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "@tensorpipe/transport-uv";
import { describe, expect, it } from "vitest";
import { MptChannelContext, stripes } from "../src/index.js";

describeChannelConformance({
  name: "mpt",
  create: () => new MptChannelContext({ lanes: 4 }),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
});

describeChannelConformance({
  name: "mpt",
  variant: "every tensor split, 3 lanes",
  create: () => new MptChannelContext({ lanes: 3, minSplit: 0 }),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
  largeTensorBytes: 64 * 1024 * 1024,
});

describe("mpt striping", () => {
  it("cuts large tensors into one aligned slice per lane, covering every byte once", () => {
    const parts = stripes(10 * 1024 * 1024 + 5, 4, 1 << 20, 0);
    expect(parts.map((p) => p.lane)).toEqual([0, 1, 2, 3]);
    expect(parts.every((p) => p.offset % 4096 === 0)).toBe(true);
    expect(parts.reduce((n, p) => n + p.length, 0)).toBe(10 * 1024 * 1024 + 5);
    parts.slice(1).forEach((p, i) => expect(p.offset).toBe(parts[i]!.offset + parts[i]!.length));
  });

  it("sends small tensors whole, lanes in turn", () => {
    expect([0, 1, 2, 3, 4].map((t) => stripes(100, 4, 1 << 20, t)[0]!.lane)).toEqual([0, 1, 2, 3, 0]);
    expect(stripes(0, 4, 0, 2)).toEqual([]);
  });
});
