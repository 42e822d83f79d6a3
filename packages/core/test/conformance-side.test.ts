/** The conformance suites' ends of a pipe, as a test that timed out leaves them. */
import { describe, expect, it } from "vitest";
import { ErrorCode } from "../src/errors.js";
import { CPU_MEMORY, LocalSide } from "../src/testing/conformance-side.js";
import { memoryPipePair } from "../src/testing/memory-pipe.js";

describe("LocalSide", () => {
  // Unhandled, the rejection would fail this run (vitest reports each one).
  it("leaves no unhandled rejection for a write no test awaits any more, and still rejects it for one that does", async () => {
    const { client, server } = memoryPipePair();
    const side = new LocalSide(client, CPU_MEMORY);
    const written = side.write({ tensors: [{ length: 10, seed: 1 }] });
    client.close();
    server.close();
    await new Promise((r) => setTimeout(r, 50));
    await expect(written).rejects.toMatchObject({ code: ErrorCode.CLOSED });
  });
});
