/**
 * When a peer closes its pipe, this side decides what that means only
 * once every connection of the pipe has been read to its end: a write
 * whose completion the peer sent before it closed resolves, though the
 * main connection's end came first. Played over the real uv transport and
 * cma channel by a peer made by hand, which orders its FINs and its
 * completion as it likes (upstream's client sometimes does the same).
 */
import { CPU_DEVICE, ErrorCode } from "@tensorpipe/core";
import { onTheWire, protocol } from "@tensorpipe/core/testing";
import { CmaChannelContext } from "@tensorpipe/channel-cma";
import { describe, expect, it } from "vitest";
import { closedAfterEach } from "./contexts.js";
import { RawSocket } from "./raw-socket.js";

const { context } = closedAfterEach();

/** A pipe opened by hand over uv + cma (upstream's wire): its main connection and cma's two. */
async function cmaPipeByHand(port: number): Promise<{ main: RawSocket; reply: RawSocket; descriptors: RawSocket; completions: RawSocket }> {
  const cma = new CmaChannelContext().deviceDescriptors()[0]!;
  const main = await RawSocket.connect(port);
  main.write(
    onTheWire([
      protocol.encodePacket({ kind: "spontaneous", contextName: "" }),
      protocol.encodeBrochure({
        transportDomainDescriptors: new Map([["uv", "uv:*"]]),
        channelDeviceDescriptors: new Map([["cma", new Map([["cpu:0", { device: CPU_DEVICE, descriptor: cma.descriptor }]])]]),
      }),
    ]),
  );
  const answer = protocol.decodeBrochureAnswer(await main.readFrame());
  expect(answer.channelForDevicePair[0]?.channel).toBe("cma");
  const requested = async (id: bigint) => {
    const s = await RawSocket.connect(port);
    s.write(onTheWire([protocol.encodePacket({ kind: "requested", registrationId: id })]));
    return s;
  };
  const reply = await requested(answer.transportRegistrationIds.get(protocol.ConnectionKind.REPLY)!);
  const [descriptors, completions] = await Promise.all(answer.channelRegistrationIds.get("cma")!.map(requested));
  return { main, reply, descriptors: descriptors!, completions: completions! };
}

describe("a peer's end", () => {
  it("over uv + cma: a write whose completion comes after the main connection's end resolves", async () => {
    const server = await context({ transports: ["uv"], channels: ["cma"] });
    const listener = await server.listen("uv://127.0.0.1:0");
    const peer = cmaPipeByHand(Number(listener.url().split(":").at(-1)));
    const pipe = await listener.accept({ timeout: 5000 });
    const c = await peer;
    const written = pipe.write({ tensors: [{ buffer: new Uint8Array(1 << 20).fill(5), targetDevice: CPU_DEVICE }] });
    await c.main.readFrame();
    await c.descriptors.readFrame();
    // The peer's main connection ends first, its completion (an empty frame) after.
    c.main.socket.end();
    await new Promise((r) => setTimeout(r, 100));
    c.completions.write(onTheWire([new Uint8Array(0)]));
    for (const s of [c.reply, c.descriptors, c.completions]) s.socket.end();
    await expect(written).resolves.toBeUndefined();
    expect(await pipe.closed).toMatchObject({ code: ErrorCode.PEER_CLOSED, message: expect.stringMatching(/^the peer closed the pipe/) });
  });

  it("over uv + cma: a write whose completion never comes fails once cma's connection has ended too", async () => {
    const server = await context({ transports: ["uv"], channels: ["cma"] });
    const listener = await server.listen("uv://127.0.0.1:0");
    const peer = cmaPipeByHand(Number(listener.url().split(":").at(-1)));
    const pipe = await listener.accept({ timeout: 5000 });
    const c = await peer;
    const written = pipe.write({ tensors: [{ buffer: new Uint8Array(1 << 20), targetDevice: CPU_DEVICE }] });
    await c.descriptors.readFrame();
    c.main.socket.end();
    await new Promise((r) => setTimeout(r, 100));
    for (const s of [c.reply, c.descriptors, c.completions]) s.socket.end();
    await expect(written).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED, message: expect.stringMatching(/1 write\(s\) of this side unfinished/) });
  });
});
