import { describe, expect, it } from "vitest";
import { largeTensors } from "../src/scripts/large-tensors.js";

describe.skipIf(process.platform !== "linux")("large-tensors: one tensor written again and again to a peer process", () => {
  it("times each message, the first apart from the steady state", async () => {
    const run = await largeTensors(8 << 20, 6);
    expect(run.pair).toBe("shm+cma");
    expect(run.ms).toHaveLength(6);
    expect(run.firstMs).toBe(run.ms[0]);
    expect(run.p99Ms).toBeGreaterThanOrEqual(run.p50Ms);
    expect(run.firstOverP50).toBeCloseTo(run.firstMs / run.p50Ms);
  });
});
