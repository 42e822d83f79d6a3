/**
 * A large message's parts are asked for in a window: a peer that announces
 * many tensors and sends none costs this side the window, not a read and
 * memory for each; every part still lands, in order, before the next
 * message's.
 */
import { describe, expect, it } from "vitest";
import { CPU_DEVICE } from "../src/device.js";
import { PARTS_IN_FLIGHT } from "../src/pipe/landing.js";
import { encodeDescriptor } from "../src/protocol/message.js";
import { MemoryNetwork } from "../src/testing/memory-connection.js";
import { memoryPipePair } from "../src/testing/memory-pipe.js";

const turns = async (n: number) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setImmediate(r));
};

describe("a large message's parts", () => {
  it("are asked for a window at a time when only announced", async () => {
    const network = new MemoryNetwork();
    const { server, connections } = memoryPipePair({ network });
    const announced = encodeDescriptor({
      metadata: "",
      payloads: [],
      tensors: Array.from({ length: 1000 }, () => ({ length: 128 << 10, sourceDevice: CPU_DEVICE, targetDevice: CPU_DEVICE, metadata: "" })),
    });
    // The descriptor alone, as a hostile peer sends it.
    await connections.client.main.write([announced]);
    const read = server.readMessage();
    await turns(20);
    expect(server.stats().channels.memory!.tensorsReceived).toBe(PARTS_IN_FLIGHT);
    server.close();
    await expect(read).rejects.toBeTruthy();
  });

  it("go to readMessage() callers in order: one that calls while another's descriptor is being taken waits its turn", async () => {
    const network = new MemoryNetwork();
    network.hold();
    const { client, server } = memoryPipePair({ network });
    for (const metadata of ["a", "b"]) void client.write({ metadata, tensors: [{ buffer: Uint8Array.of(1), targetDevice: CPU_DEVICE }] });
    const first = server.readMessage();
    network.flush();
    // The first caller's descriptor came, its message not yet read: a second caller, as a front's next lane.
    const second = server.readMessage();
    network.release();
    expect((await first).metadata).toBe("a");
    expect((await second).metadata).toBe("b");
  });

  it("all land, in order, by readMessage and by read, before the next message's", async () => {
    const { client, server } = memoryPipePair();
    const sizes = Array.from({ length: 300 }, (_, i) => (i * 37) % 5000);
    const tensors = sizes.map((n, i) => ({ buffer: Uint8Array.from({ length: n }, (_, k) => (i + k) & 0xff), targetDevice: CPU_DEVICE }));
    const payloads = [{ data: Uint8Array.of(1, 2, 3) }, ...Array.from({ length: 100 }, (_, i) => ({ data: new Uint8Array(i).fill(i) }))];
    for (let round = 0; round < 2; round++) {
      await client.write({ metadata: `big${round}`, payloads, tensors });
      await client.write({ metadata: `small${round}`, tensors: [{ buffer: Uint8Array.of(9), targetDevice: CPU_DEVICE }] });
    }
    const first = await server.readMessage();
    expect(first.metadata).toBe("big0");
    first.tensors.forEach((t, i) => expect([...t.buffer], `tensor ${i}`).toEqual([...tensors[i]!.buffer]));
    first.payloads.forEach((p, i) => expect([...p.data]).toEqual([...payloads[i]!.data]));
    expect((await server.readMessage()).metadata).toBe("small0");
    const d = await server.readDescriptor();
    const allocation = {
      payloads: d.payloads.map((p) => ({ data: new Uint8Array(p.length) })),
      tensors: d.tensors.map((t) => ({ buffer: new Uint8Array(t.length) })),
    };
    const landed = server.read(allocation);
    // The next message's descriptor is read only once every part of this one has been asked for.
    const next = server.readMessage();
    await landed;
    allocation.tensors.forEach((t, i) => expect([...t.buffer], `tensor ${i}`).toEqual([...tensors[i]!.buffer]));
    expect((await next).tensors[0]!.buffer[0]).toBe(9);
  });
});
