/** Opt-in shared-secret authentication, off by default (the interop tests check the default bytes). */
import { AUTH_ENTRY, ErrorCode, SharedSecretAuth, type TensorPipeError, protocol } from "@tensorpipe/core";
import { onTheWire } from "@tensorpipe/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/cli";
import { RawSocket } from "../raw-socket.js";
import { echoMetadata } from "../echo.js";

const secret = "correct horse battery staple";
const uvBasic = { transports: ["uv"], channels: ["basic"] };

describe("shared-secret authentication", () => {
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0)) await c();
  });

  async function server(auth?: { secret: string }) {
    const ctx = await createContext({ ...uvBasic, auth });
    closers.push(() => ctx.close());
    const listener = await ctx.listen("uv://127.0.0.1:0");
    const errors: TensorPipeError[] = [];
    listener.on("connectionError", (e) => errors.push(e));
    echoMetadata(listener);
    return { listener, errors, url: listener.addresses()[0]! };
  }

  async function client(auth?: { secret: string }) {
    const ctx = await createContext({ ...uvBasic, auth });
    closers.push(() => ctx.close());
    return ctx;
  }

  it("lets peers with the same secret talk", async () => {
    const { url } = await server({ secret });
    const pipe = await (await client({ secret })).connect(url);
    await pipe.write({ metadata: "hello" });
    expect((await pipe.readMessage()).metadata).toBe("hello");
  });

  it("drops a peer with another secret", async () => {
    const { url, errors } = await server({ secret });
    await expect((await client({ secret: "another secret, also long" })).connect(url)).rejects.toMatchObject({
      code: ErrorCode.NEGOTIATION,
    });
    await expect.poll(() => errors.length).toBe(1);
    expect(errors[0]).toMatchObject({ code: ErrorCode.PERMISSION_DENIED, message: expect.stringMatching(/does not match/) });
  });

  it("drops a peer without a secret", async () => {
    const { url, errors } = await server({ secret });
    await expect((await client()).connect(url)).rejects.toBeTruthy();
    await expect.poll(() => errors.length).toBe(1);
    expect(errors[0]).toMatchObject({ code: ErrorCode.PERMISSION_DENIED, message: expect.stringMatching(/did not authenticate/) });
  });

  it("refuses a listener that cannot prove it knows the secret", async () => {
    const { url } = await server();
    await expect((await client({ secret })).connect(url)).rejects.toMatchObject({
      code: ErrorCode.PERMISSION_DENIED,
      message: expect.stringMatching(/listener did not authenticate/),
    });
  });

  it("refuses a replayed handshake and uses registration ids nobody can guess", async () => {
    const { listener, errors } = await server({ secret });
    const port = Number(listener.addresses()[0]!.split(":").at(-1));
    const hello = new SharedSecretAuth({ secret }).clientHello();
    const brochure = protocol.encodeBrochure({
      transportDomainDescriptors: new Map([
        ["uv", "uv:*"],
        [AUTH_ENTRY, hello.entry],
      ]),
      channelDeviceDescriptors: new Map([["basic", new Map([["cpu:0", { device: { type: "cpu", index: 0 }, descriptor: "any" }]])]]),
    });
    const bytes = onTheWire([protocol.encodePacket({ kind: "spontaneous", contextName: "" }), brochure]);
    const first = await RawSocket.connect(port);
    first.write(bytes);
    const answer = protocol.decodeBrochureAnswer(await first.readFrame());
    new SharedSecretAuth({ secret }).verifyServer(hello.nonce, answer.channelDeviceDescriptors.get(AUTH_ENTRY));
    const ids = [...answer.transportRegistrationIds.values(), ...[...answer.channelRegistrationIds.values()].flat()];
    expect(ids.every((id) => id > 1_000_000)).toBe(true);
    first.socket.destroy();
    const replay = await RawSocket.connect(port);
    replay.write(bytes);
    await replay.closed;
    await expect.poll(() => errors.some((e) => /replayed/.test(e.message))).toBe(true);
  });

  it("needs a secret of at least 16 bytes", async () => {
    await expect(createContext({ auth: { secret: "short" } })).rejects.toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_ARG }),
    );
  });
});

describe("listeners bind where told", () => {
  it("a listener on 127.0.0.1 is not reachable on another local address", async () => {
    const ctx = await createContext(uvBasic);
    try {
      const listener = await ctx.listen("uv://127.0.0.1:0");
      const port = Number(listener.addresses()[0]!.split(":").at(-1));
      expect(listener.addresses()[0]).toBe(`uv://127.0.0.1:${port}`);
      await expect(ctx.connect(`uv://[::1]:${port}`)).rejects.toMatchObject({ code: ErrorCode.CONNECTION_REFUSED });
      await expect(ctx.listen("uv://*:0")).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    } finally {
      await ctx.close();
    }
  });
});
