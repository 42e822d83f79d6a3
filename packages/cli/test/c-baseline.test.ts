import { describe, expect, it } from "vitest";
import { CBaseline, C_BASELINES } from "../src/c-baseline.js";

// The C programs the bench holds the transports against, built with the addons.
describe.each(C_BASELINES)("$name", (spec) => {
  const found = CBaseline.find(spec);

  it("is built beside its transport's addon", () => {
    expect(found).toBeInstanceOf(CBaseline);
  });

  it("times one round trip per frame, the bytes echoed intact", async () => {
    const us = await (found as CBaseline).roundTrips(4096, 50);
    expect(us).toHaveLength(50);
    for (const t of us) expect(t).toBeGreaterThan(0);
  });

  it("streams frames larger than a ring or a socket buffer, the last one checked at the peer", async () => {
    const gbps = await (found as CBaseline).throughput(9 * 1024 * 1024 + 5, 3);
    expect(gbps).toBeGreaterThan(0);
  });
});
