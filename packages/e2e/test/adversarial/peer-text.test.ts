/**
 * A peer's words are shown only made safe: whatever device types and
 * descriptors it sends, no escape sequence, line break or flood of text
 * reaches the listener's debug log, its errors, its flight records or its
 * pipes' path reports (docs/security.md).
 */
import { CPU_DEVICE, ErrorCode } from "@tensorpipe/core";
import { onTheWire, protocol } from "@tensorpipe/core/testing";
import { CmaChannelContext } from "@tensorpipe/channel-cma";
import { afterEach, describe, expect, it } from "vitest";
import { RawSocket } from "../raw-socket.js";
import { Victim, rawPipe } from "./peers.js";

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

/** What a hostile peer writes where text is shown: a screen clear, a colour, a forged line, and a lot of it. */
const HOSTILE = "\u001b[2J\u001b[31m\nFORGED tensorpipe: all checks passed\u2028\u202e\u00ad\u{e0041}\u{e0042}\u3164";

/** Every place the victim's words could carry a peer's: its log, and every text of every line it said. */
function shown(v: Victim): string {
  const texts = v.events.flatMap((e) => Object.values(e).filter((x): x is string => typeof x === "string"));
  return [v.stderr, ...texts].join("\n");
}

/** `text` holds no control or invisible character of a peer's, and no line of its making. */
function expectSafe(text: string): void {
  expect(text).not.toMatch(/[\u001b\u2028\u202e\u00ad\u{e0041}\u{e0042}\u3164]/u);
  expect(text).not.toMatch(/^FORGED/m);
}

describe("a peer's words", () => {
  it("in device types, descriptors and a cma descriptor reach no log, error, flight record or path report raw", async () => {
    const v = await Victim.start({}, undefined, { NODE_DEBUG: "tensorpipe" });
    cleanup.push(() => v.stop());
    // A device type in the brochure: basic pairs any device described "any".
    const s = await RawSocket.connect(v.port);
    s.write(
      onTheWire([
        protocol.encodePacket({ kind: "spontaneous", contextName: HOSTILE }),
        protocol.encodeBrochure({
          transportDomainDescriptors: new Map([["uv", "uv:*"]]),
          channelDeviceDescriptors: new Map([["basic", new Map([["x", { device: { type: HOSTILE, index: 0 }, descriptor: "any" }]])]]),
        }),
      ]),
    );
    await v.next((e) => e.event === "connection-error" && e.code === ErrorCode.PROTOCOL && /device type/.test(e.message!));
    // A cma descriptor whose uid and capabilities are escapes: the listener explains the mismatch.
    const cma = new CmaChannelContext().deviceDescriptors()[0]!.descriptor.split("_");
    cma[5] = HOSTILE;
    cma[7] = HOSTILE.repeat(50);
    const pipe = await rawPipe(v.port, undefined, new Map([["cma", new Map([["cpu:0", { device: CPU_DEVICE, descriptor: cma.join("_") }]])]]));
    const path = await v.next((e) => e.event === "path" && /cma/.test(e.text!));
    expect(path.text).toMatch(/users differ/);
    // A device type in a message's descriptor.
    pipe.main.write(
      onTheWire([protocol.encodeDescriptor({ metadata: "", payloads: [], tensors: [{ length: 1, sourceDevice: { type: HOSTILE, index: 0 }, metadata: "" }] })]),
    );
    const failed = await v.next((e) => e.event === "pipe-error");
    expect(failed).toMatchObject({ code: ErrorCode.PROTOCOL, message: expect.stringMatching(/device type/) });
    expect(failed.record).toMatch(/error/);
    expectSafe(shown(v));
    expect(v.stderr).toMatch(/TENSORPIPE/);
    // Escaped, the peer's words are still there to read.
    expect(shown(v)).toMatch(/\\x1b\[2J/);
  });
});
