/**
 * The peer's name and pid on both ends of a pipe (Pipe.peerName,
 * Pipe.peerPid): given by each context's ContextOptions.name, proved under
 * authentication, and never taken from a peer that could not prove it.
 */
import { type Context, ErrorCode, type Pipe, type TensorPipeError } from "@tensorpipe/core";
import { NAME_ENTRY, SharedSecretAuth, onTheWire, protocol } from "@tensorpipe/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { RawSocket } from "./raw-socket.js";

const secret = "correct horse battery staple";

describe("the peer's name and pid on both ends", () => {
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0).reverse()) await c();
  });
  const context = async (options: Parameters<typeof createContext>[0]): Promise<Context> => {
    const ctx = await createContext(options);
    closers.push(() => ctx.close());
    return ctx;
  };
  const pair = async (transport: "uv" | "shm", names: { dialler?: string; listener?: string }, auth?: { secret: string }) => {
    const backends = { transports: [transport], channels: ["basic"], auth };
    const server = await context({ ...backends, name: names.listener });
    const listener = await server.listen(transport === "uv" ? "uv://127.0.0.1:0" : "shm://");
    const client = await context({ ...backends, name: names.dialler });
    const [dialled, accepted] = await Promise.all([client.connect(listener.addresses()[0]!), listener.accept()]);
    return { dialled, accepted };
  };

  for (const transport of ["uv", "shm"] as const) {
    it(`over ${transport}: each end names the other`, async () => {
      const { dialled, accepted } = await pair(transport, { dialler: "front", listener: "worker-3" });
      expect(dialled.peerName).toBe("worker-3");
      expect(accepted.peerName).toBe("front");
    });

    it(`over ${transport}: a context without a name gives none`, async () => {
      const { dialled, accepted } = await pair(transport, {});
      expect(dialled.peerName).toBeUndefined();
      expect(accepted.peerName).toBeUndefined();
    });

    it(`over ${transport}, under authentication: each end names the other`, async () => {
      const { dialled, accepted } = await pair(transport, { dialler: "front", listener: "worker-3" }, { secret });
      expect(dialled.peerName).toBe("worker-3");
      expect(accepted.peerName).toBe("front");
    });
  }

  it("reports no name over 1024 characters or with control characters", async () => {
    for (const name of ["x".repeat(1025), "evil\u001b[2Jname", "a\nb"]) {
      const { accepted } = await pair("uv", { dialler: name });
      expect(accepted.peerName).toBeUndefined();
    }
    const { accepted } = await pair("uv", { dialler: "x".repeat(1024) });
    expect(accepted.peerName).toHaveLength(1024);
  });

  it("knows the peer's pid where the kernel says it (shm), not over TCP (uv)", async () => {
    const shm = await pair("shm", {});
    expect(shm.dialled.peerPid).toBe(process.pid);
    expect(shm.accepted.peerPid).toBe(process.pid);
    const uv = await pair("uv", {});
    expect(uv.dialled.peerPid).toBeUndefined();
    expect(uv.accepted.peerPid).toBeUndefined();
  });

  describe("under authentication, a name counts only when the handshake proved it", () => {
    const offer = (auth: string, nameProof?: string) =>
      protocol.encodeBrochure({
        transportDomainDescriptors: new Map([
          ["uv", "uv:*"],
          ["tensorpipe-js.auth.hmac-sha256", auth],
          ...(nameProof === undefined ? [] : [[NAME_ENTRY, nameProof] as [string, string]]),
        ]),
        channelDeviceDescriptors: new Map([["basic", new Map([["cpu:0", { device: { type: "cpu", index: 0 }, descriptor: "any" }]])]]),
      });

    /** A dialler by hand that names itself `name` and gives `proof(...)` for it; returns the listener's pipe or error. */
    async function dialByHand(name: string, proof: (auth: SharedSecretAuth, session: { client: string; listener: string }) => string | undefined) {
      const server = await context({ transports: ["uv"], channels: ["basic"], auth: { secret } });
      const listener = await server.listen("uv://127.0.0.1:0");
      const errors: TensorPipeError[] = [];
      listener.on("connectionError", (e) => errors.push(e));
      const port = Number(listener.addresses()[0]!.split(":").at(-1));
      const auth = new SharedSecretAuth({ secret });
      const hello = auth.hello();
      const main = await RawSocket.connect(port);
      closers.push(() => main.socket.destroy());
      main.write(onTheWire([protocol.encodePacket({ kind: "spontaneous", contextName: name }), offer(hello.entry)]));
      const { session, entry } = auth.answerChallenge(hello.client, protocol.decodeBrochureAnswer(await main.readFrame()));
      main.write(onTheWire([offer(entry, proof(auth, session))]));
      const accepted = listener.accept();
      accepted.catch(() => undefined);
      const answer = await main.readFrame().catch(() => undefined);
      if (answer === undefined) return { errors };
      const decoded = protocol.decodeBrochureAnswer(answer);
      for (const id of [...decoded.transportRegistrationIds.values(), ...[...decoded.channelRegistrationIds.values()].flat()]) {
        const c = await RawSocket.connect(port);
        closers.push(() => c.socket.destroy());
        c.write(onTheWire([protocol.encodePacket({ kind: "requested", registrationId: id }), auth.connectionProof(session, id)]));
      }
      return { errors, pipe: (await accepted) as Pipe };
    }

    it("a proved name is the pipe's", async () => {
      const { pipe } = await dialByHand("front", (auth, session) => auth.nameProof(session, "dialler", "front"));
      expect(pipe?.peerName).toBe("front");
    });

    it("a name without a proof (a peer of an earlier version) is not taken", async () => {
      const { pipe } = await dialByHand("front", () => undefined);
      expect(pipe).toBeDefined();
      expect(pipe?.peerName).toBeUndefined();
    });

    it("a proof of another name drops the connection, and the listener goes on", async () => {
      const { errors, pipe } = await dialByHand("admin", (auth, session) => auth.nameProof(session, "dialler", "front"));
      expect(pipe).toBeUndefined();
      await expect.poll(() => errors.length).toBe(1);
      expect(errors[0]).toMatchObject({ code: ErrorCode.PERMISSION_DENIED, message: expect.stringMatching(/dialler's name does not match its proof/) });
    });

    it("a proof made for the other side's role is refused", async () => {
      const { errors } = await dialByHand("front", (auth, session) => auth.nameProof(session, "listener", "front"));
      await expect.poll(() => errors.length).toBe(1);
      expect(errors[0]!.code).toBe(ErrorCode.PERMISSION_DENIED);
    });
  });
});
