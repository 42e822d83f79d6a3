/**
 * A listener fed bytes that are not a TensorPipe peer drops that connection
 * with a clear error and goes on serving; a client that reaches something
 * that is not a TensorPipe listener fails with a clear error.
 */
import { randomBytes } from "node:crypto";
import { type AddressInfo, type Server, createServer } from "node:net";
import { type Context, ErrorCode, type Listener, type TensorPipeError } from "@tensorpipe/core";
import { protocol, onTheWire } from "@tensorpipe/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { RawSocket, brochureByHand } from "./raw-socket.js";
import { echoMetadata } from "./echo.js";

const lengthPrefix = (n: bigint) => {
  const b = Buffer.alloc(8);
  b.writeBigUInt64LE(n);
  return b;
};

describe("bad input on a listener", () => {
  let server: Context;
  let client: Context;
  let listener: Listener;
  let port: number;
  const errors: TensorPipeError[] = [];

  beforeAll(async () => {
    server = await createContext({ handshakeTimeout: 300 });
    client = await createContext();
    listener = await server.listen("uv://127.0.0.1:0");
    listener.on("connectionError", (e) => errors.push(e));
    port = Number(listener.addresses()[0]!.split(":").at(-1));
    echoMetadata(listener);
  });

  afterAll(async () => {
    await client.close();
    await server.close();
  });

  /** Sends `bytes`, expects the listener to drop the connection with an error matching `expected`. */
  async function expectDropped(bytes: Uint8Array, expected: { code: string; message?: RegExp }, end = false) {
    const before = errors.length;
    const rss = process.memoryUsage().rss;
    const s = await RawSocket.connect(port);
    s.write(bytes);
    if (end) s.socket.end();
    await s.closed;
    await expect.poll(() => errors.length).toBe(before + 1);
    const err = errors.at(-1)!;
    expect(err.code).toBe(expected.code);
    if (expected.message) expect(err.message).toMatch(expected.message);
    expect(process.memoryUsage().rss - rss).toBeLessThan(64 * 1024 * 1024);
    await expectStillServing();
  }

  async function expectStillServing() {
    const pipe = await client.connect(listener.addresses()[0]!);
    await pipe.write({ metadata: "still here" });
    expect((await pipe.readMessage()).metadata).toBe("still here");
    pipe.close();
  }

  it("drops random bytes", async () => {
    await expectDropped(randomBytes(4096), { code: ErrorCode.PROTOCOL });
  });

  it("drops a 2^62 length prefix without allocating it", async () => {
    await expectDropped(lengthPrefix(2n ** 62n), { code: ErrorCode.PROTOCOL, message: /exceeds the limit/ });
  });

  it("drops a 2^64-1 length prefix", async () => {
    await expectDropped(lengthPrefix(2n ** 64n - 1n), { code: ErrorCode.PROTOCOL, message: /exceeds the limit/ });
  });

  it("drops a frame cut short", async () => {
    const bytes = Buffer.concat([lengthPrefix(100n), Buffer.alloc(10)]);
    await expectDropped(bytes, { code: ErrorCode.CONNECTION_RESET, message: /truncated frame/ }, true);
  });

  it("drops a header cut short", async () => {
    await expectDropped(Buffer.from([5, 0, 0]), { code: ErrorCode.CONNECTION_RESET, message: /truncated frame/ }, true);
  });

  it("drops an unknown registration id", async () => {
    const bytes = onTheWire([protocol.encodePacket({ kind: "requested", registrationId: 99_999n })]);
    await expectDropped(bytes, { code: ErrorCode.PROTOCOL, message: /unknown registration id 99999/ });
  });

  it("tells a connection that comes after its handshake failed from a forged id", async () => {
    const before = errors.length;
    const { main, answer } = await brochureByHand(port);
    // The peer goes before it opens what it was given ids for: its handshake fails...
    main.socket.destroy();
    await expect.poll(() => errors.length).toBe(before + 1);
    // ...and a connection that was already on its way then is late, not forged.
    const id = answer.transportRegistrationIds.get(protocol.ConnectionKind.REPLY)!;
    await expectDropped(onTheWire([protocol.encodePacket({ kind: "requested", registrationId: id })]), {
      code: ErrorCode.CLOSED,
      message: new RegExp(`registration id ${id} came after its handshake had failed: `),
    });
  });

  it("drops a valid packet followed by a garbage brochure", async () => {
    const bytes = onTheWire([protocol.encodePacket({ kind: "spontaneous", contextName: "" }), randomBytes(64)]);
    await expectDropped(bytes, { code: ErrorCode.PROTOCOL, message: /malformed Brochure/ });
  });

  it("drops a peer that offers no transport in common", async () => {
    const brochure = protocol.encodeBrochure({
      transportDomainDescriptors: new Map([["ibv", "x"]]),
      channelDeviceDescriptors: new Map(),
    });
    const bytes = onTheWire([protocol.encodePacket({ kind: "spontaneous", contextName: "" }), brochure]);
    await expectDropped(bytes, { code: ErrorCode.NEGOTIATION, message: /no transport in common/ });
  });

  it("drops a connection that never finishes the handshake", async () => {
    await expectDropped(new Uint8Array(0), { code: ErrorCode.TIMEOUT, message: /handshake/ });
  });

  it("serves 20 bad connections at once and a good one among them", async () => {
    const before = errors.length;
    const bad = await Promise.all(Array.from({ length: 20 }, () => RawSocket.connect(port)));
    for (const s of bad) s.write(randomBytes(100));
    await expectStillServing();
    await Promise.all(bad.map((s) => s.closed));
    await expect.poll(() => errors.length).toBe(before + 20);
  });
});

describe("a client reaching something that is not a TensorPipe listener", async () => {
  const context = await createContext({ handshakeTimeout: 500 });
  const servers: Server[] = [];

  async function serve(onSocket: (s: import("node:net").Socket) => void): Promise<string> {
    const s = createServer(onSocket).listen(0, "127.0.0.1");
    servers.push(s);
    await new Promise((r) => s.once("listening", r));
    return `uv://127.0.0.1:${(s.address() as AddressInfo).port}`;
  }

  afterAll(async () => {
    await context.close();
    for (const s of servers) s.close();
  });

  it("fails with ERR_TP_NEGOTIATION when the server hangs up", async () => {
    const url = await serve((s) => s.end());
    await expect(context.connect(url)).rejects.toMatchObject({ code: ErrorCode.NEGOTIATION, message: /not a TensorPipe listener/ });
  });

  it("fails with ERR_TP_PROTOCOL when the server answers garbage", async () => {
    const url = await serve((s) => s.write(onTheWire([randomBytes(50)])));
    await expect(context.connect(url)).rejects.toMatchObject({ code: ErrorCode.PROTOCOL });
  });

  it("fails with ERR_TP_PROTOCOL when the server announces a huge answer", async () => {
    const url = await serve((s) => s.write(lengthPrefix(2n ** 62n)));
    await expect(context.connect(url)).rejects.toMatchObject({ code: ErrorCode.PROTOCOL, message: /exceeds the limit/ });
  });

  it("fails with ERR_TP_TIMEOUT when the server never answers", async () => {
    const url = await serve(() => undefined);
    await expect(context.connect(url)).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
  });

  it("fails with ERR_TP_ABORTED when the caller aborts", async () => {
    const url = await serve(() => undefined);
    const ac = new AbortController();
    setTimeout(() => ac.abort(), 50);
    await expect(context.connect(url, { signal: ac.signal })).rejects.toMatchObject({ code: ErrorCode.ABORTED });
  });

  it("fails with ERR_TP_INVALID_ARG for a scheme nobody registered", async () => {
    await expect(context.connect("ib://x")).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
  });
});
