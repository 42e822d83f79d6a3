/**
 * How a pipe ends when its peer closes, decided only once every
 * connection of the pipe has been read to its end: over a memory pipe
 * whose deliveries are ordered by hand.
 */
import { describe, expect, it } from "vitest";
import { CPU_DEVICE } from "../src/device.js";
import { ErrorCode } from "../src/errors.js";
import { encodeDescriptor } from "../src/protocol/message.js";
import { MemoryNetwork } from "../src/testing/memory-connection.js";
import { memoryPipePair } from "../src/testing/memory-pipe.js";

/** Delivers what waits, one frame or end a turn as a transport does, until `p` has settled. */
async function deliverUntil(network: MemoryNetwork, p: Promise<unknown>): Promise<void> {
  let settled = false;
  void p.then(
    () => (settled = true),
    () => (settled = true),
  );
  for (let turns = 0; !settled; turns++) {
    if (turns > 1000) throw new Error("nothing settles");
    network.step();
    await new Promise((r) => setImmediate(r));
  }
}

describe("a pipe whose peer closes", () => {
  it("resolves a write whose acknowledgement the peer sent before closing, though its main connection's end is read first", async () => {
    const network = new MemoryNetwork();
    network.hold();
    const { client, server, connections } = memoryPipePair({ network, channel: "acknowledged" });
    const written = server.write({ metadata: "last", tensors: [{ buffer: new Uint8Array(16).fill(3), targetDevice: CPU_DEVICE }] });
    const read = client.readMessage();
    await deliverUntil(network, read);
    expect((await read).metadata).toBe("last");
    // As upstream's benchmark does: its last read done, it acknowledges and closes at once.
    client.close();
    await new Promise((r) => setImmediate(r));
    network.step(connections.server.main);
    await new Promise((r) => setImmediate(r));
    await deliverUntil(network, written);
    await expect(written).resolves.toBeUndefined();
    expect((await server.closed).code).toBe(ErrorCode.PEER_CLOSED);
    expect((await server.closed).message).toMatch(/^the peer closed the pipe/);
  });

  it("rejects a write the peer never acknowledged, once every connection of the pipe has ended", async () => {
    const network = new MemoryNetwork();
    network.hold();
    const { client, server } = memoryPipePair({ network, channel: "acknowledged" });
    const written = server.write({ tensors: [{ buffer: new Uint8Array(16), targetDevice: CPU_DEVICE }] });
    client.close();
    await deliverUntil(network, written);
    await expect(written).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED, message: expect.stringMatching(/1 write\(s\) of this side unfinished/) });
  });
});

describe("a pipe whose peer closes in the middle of a message", () => {
  it("fails the read as a truncated message though the end was already here when the read began", async () => {
    const network = new MemoryNetwork();
    network.hold();
    const { server, connections } = memoryPipePair({ network });
    const twoPayloads = encodeDescriptor({
      metadata: "cut",
      payloads: [
        { length: 4, metadata: "" },
        { length: 4, metadata: "" },
      ],
      tensors: [],
    });
    // The peer's frames and its end all come before this side reads: the second payload's read meets the end at once.
    await connections.client.main.write([twoPayloads, Uint8Array.of(1, 2, 3, 4)]);
    connections.client.main.close();
    network.flush();
    await expect(server.readMessage()).rejects.toMatchObject({
      code: ErrorCode.CONNECTION_RESET,
      message: expect.stringMatching(/^truncated message: .*middle of a message/),
    });
  });
});
