/** context.close() with pipes mid-transfer: every pending operation ends with ERR_TP_CLOSED; join() resolves. */
import { CPU_DEVICE, ErrorCode } from "@tensorpipe/core";
import { patterned } from "@tensorpipe/core/testing";
import { describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";

describe.each([
  ["uv", "basic"],
  ["shm", "cma"],
])("graceful shutdown over %s + %s", (transport, channel) => {
  it("rejects every pending operation with ERR_TP_CLOSED and joins", async () => {
    const choice = { transports: [transport], channels: [channel] };
    const server = await createContext(choice);
    const client = await createContext(choice);
    const listener = await server.listen(transport === "uv" ? "uv://127.0.0.1:0" : "shm://*");
    const pairs = await Promise.all(Array.from({ length: 4 }, () => Promise.all([client.connect(listener.addresses()[0]!), listener.accept()])));
    const pending: Promise<unknown>[] = [];
    for (const [a, _b] of pairs) {
      // Mid-transfer: large writes nobody reads yet, reads waiting on either side.
      pending.push(a.write({ tensors: [{ buffer: patterned(32 * 1024 * 1024, 1), targetDevice: CPU_DEVICE }] }));
      // Left to the reader (null): it waits for an answer that never comes.
      pending.push(a.write({ tensors: [{ buffer: patterned(100, 2), targetDevice: null }] }));
      pending.push(a.readDescriptor(), a.readMessage());
    }
    const accepting = listener.accept();
    await new Promise((r) => setTimeout(r, 10));
    const closing = client.close();
    const results = await Promise.allSettled(pending);
    for (const r of results) {
      expect(r.status).toBe("rejected");
      expect((r as PromiseRejectedResult).reason.code).toBe(ErrorCode.CLOSED);
    }
    await closing;
    await client.join();
    // The other side sees its peer gone, not a hang: what had arrived is
    // still handed out (cma may even finish copying from the live process,
    // and a whole later message may sit in the ring), then a read fails and
    // the pipe ends.
    for (const [, b] of pairs) {
      const outcomes: string[] = [];
      while (outcomes.length < 4 && !outcomes.at(-1)?.startsWith("ERR")) {
        outcomes.push(
          await b.readMessage().then(
            () => "complete",
            (e) => `${e.code}${e.errnoName ? ` ${e.errnoName}` : ""}`,
          ),
        );
      }
      expect(outcomes.join(",")).toMatch(/^(complete,){0,2}ERR_TP_(PEER_CLOSED|CONNECTION_RESET|PROTOCOL)( \w+)?$/);
      expect((await b.closed).code).toMatch(/^ERR_TP_(PEER_CLOSED|CONNECTION_RESET|PROTOCOL)$/);
    }
    await server.close();
    await expect(accepting).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    await server.join();
    await expect(client.connect(listener.addresses()[0]!)).rejects.toMatchObject({ code: ErrorCode.CLOSED });
  });
});
