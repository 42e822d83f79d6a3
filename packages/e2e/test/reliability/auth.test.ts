/** Opt-in shared-secret authentication, off by default (the interop tests check the default bytes). */
import { ErrorCode, type TensorPipeError } from "@tensorpipe/core";
import { AUTH_ENTRY, SharedSecretAuth, protocol, onTheWire } from "@tensorpipe/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { RawSocket, brochureByHand } from "../raw-socket.js";
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
    // The listener proves itself first, so the client is the one that finds out.
    await expect((await client({ secret: "another secret, also long" })).connect(url)).rejects.toMatchObject({
      code: ErrorCode.PERMISSION_DENIED,
      message: expect.stringMatching(/listener's shared secret does not match/),
    });
    await expect.poll(() => errors.length).toBe(1);
    expect(errors[0]!.code).toBe(ErrorCode.PEER_CLOSED);
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

  const offer = (entry: string) =>
    protocol.encodeBrochure({
      transportDomainDescriptors: new Map([
        ["uv", "uv:*"],
        [AUTH_ENTRY, entry],
      ]),
      channelDeviceDescriptors: new Map([["basic", new Map([["cpu:0", { device: { type: "cpu", index: 0 }, descriptor: "any" }]])]]),
    });
  const portOf = (url: string) => Number(url.split(":").at(-1));

  /** Plays an authenticating client by hand up to the pipe's BrochureAnswer; returns what a listener could be replayed. */
  async function handshakeByHand(port: number) {
    const auth = new SharedSecretAuth({ secret });
    const hello = auth.hello();
    const helloBytes = onTheWire([protocol.encodePacket({ kind: "spontaneous", contextName: "" }), offer(hello.entry)]);
    const main = await RawSocket.connect(port);
    main.write(helloBytes);
    const { session, entry } = auth.answerChallenge(hello.client, protocol.decodeBrochureAnswer(await main.readFrame()));
    const proofBytes = onTheWire([offer(entry)]);
    main.write(proofBytes);
    const answer = protocol.decodeBrochureAnswer(await main.readFrame());
    return { auth, session, main, answer, helloBytes, proofBytes };
  }

  it("refuses a captured handshake replayed to the same listener or another with the same secret", async () => {
    const first = await server({ secret });
    const second = await server({ secret });
    const captured = await handshakeByHand(portOf(first.url));
    expect(captured.answer.transport).toBe("uv");
    captured.main.socket.destroy();
    for (const target of [first, second]) {
      const replay = await RawSocket.connect(portOf(target.url));
      replay.write(captured.helloBytes);
      // A fresh challenge: the captured proof answers another one.
      await replay.readFrame();
      replay.write(captured.proofBytes);
      await replay.closed;
      await expect.poll(() => target.errors.some((e) => e.code === ErrorCode.PERMISSION_DENIED && /does not match/.test(e.message))).toBe(true);
    }
  });

  it("ties each requested connection to its pipe: an id seen on the wire lets nobody in", async () => {
    const { url, errors } = await server({ secret });
    const port = portOf(url);
    const { auth, session, answer } = await handshakeByHand(port);
    const ids = [...answer.transportRegistrationIds.values(), ...[...answer.channelRegistrationIds.values()].flat()];
    // Without the proof frame, and with the proof of another id.
    const thief = await RawSocket.connect(port);
    thief.write(onTheWire([protocol.encodePacket({ kind: "requested", registrationId: ids[0]! }), auth.connectionProof(session, ids[0]! + 1n)]));
    await thief.closed;
    await expect.poll(() => errors.some((e) => /did not prove it belongs to its pipe/.test(e.message))).toBe(true);
    // The real connections still get in with their ids.
    for (const id of ids) {
      const c = await RawSocket.connect(port);
      c.write(onTheWire([protocol.encodePacket({ kind: "requested", registrationId: id }), auth.connectionProof(session, id)]));
    }
    await new Promise((r) => setTimeout(r, 100));
    expect(errors.filter((e) => /did not prove/.test(e.message))).toHaveLength(1);
  });

  it("uses registration ids nobody can guess, with or without a secret", async () => {
    for (const auth of [undefined, { secret }]) {
      const { url } = await server(auth);
      if (auth) {
        const { answer } = await handshakeByHand(portOf(url));
        const ids = [...answer.transportRegistrationIds.values(), ...[...answer.channelRegistrationIds.values()].flat()];
        expect(ids.every((id) => id > 2n ** 32n)).toBe(true);
        continue;
      }
      const { answer } = await brochureByHand(portOf(url));
      const ids = [...answer.transportRegistrationIds.values(), ...[...answer.channelRegistrationIds.values()].flat()];
      expect(ids.length).toBe(2);
      expect(ids.every((id) => id > 2n ** 32n)).toBe(true);
    }
  });

  it("needs a secret of at least 16 bytes", async () => {
    await expect(createContext({ auth: { secret: "short" } })).rejects.toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG }));
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
