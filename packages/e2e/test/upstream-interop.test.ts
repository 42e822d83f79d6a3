/**
 * Interoperability with C++ TensorPipe, played from the bytes it put on the
 * wire (shared/protocol/upstream-uv-basic-capture.txt): our client against
 * the captured server, and the captured client against our listener. Every
 * byte we send must equal the capture.
 */
import { type AddressInfo, createServer } from "node:net";
import { CPU_DEVICE, type Pipe, protocol } from "@tensorpipe/core";
import { loadCapture, onTheWire, stream } from "@tensorpipe/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/cli";
import { RawSocket } from "./raw-socket.js";

const capture = loadCapture(new URL("../../../../shared/protocol/upstream-uv-basic-capture.txt", import.meta.url));
const clientMain = stream(capture, "53816", "29777").frames;
const serverMain = stream(capture, "29777", "53816").frames;
const replyFirst = stream(capture, "53822", "29777").frames;
const clientChannel = stream(capture, "53834", "29777").frames;
const serverChannel = stream(capture, "29777", "53834").frames;
const ROUND_TRIPS = 6;

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const payload = Uint8Array.from([0, 1, 2, 3, 4]);
const tensor = Uint8Array.from([0, 1, 2, 3, 4, 5, 6, 7]);

describe("interoperability with upstream C++ TensorPipe (captured bytes)", () => {
  const cleanup: (() => unknown)[] = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
  });

  it("our client speaks byte for byte like the C++ client to a C++ server", async () => {
    const accepted: RawSocket[] = [];
    const arrivals: (() => void)[] = [];
    const server = createServer((s) => {
      accepted.push(new RawSocket(s));
      arrivals.shift()?.();
    }).listen(0, "127.0.0.1");
    await new Promise((r) => server.once("listening", r));
    cleanup.push(() => new Promise((r) => server.close(r)));
    const port = (server.address() as AddressInfo).port;
    const nextSocket = async (i: number) => {
      while (accepted.length <= i) await new Promise<void>((r) => arrivals.push(r));
      return accepted[i]!;
    };

    const context = await createContext({ transports: ["uv"], channels: ["basic"] });
    cleanup.push(() => context.close());
    const connecting = context.connect(`uv://127.0.0.1:${port}`);

    const main = await nextSocket(0);
    expect(hex(await main.readFrame())).toBe(hex(clientMain[0]!));
    expect(hex(await main.readFrame())).toBe(hex(clientMain[1]!));
    // The captured answer, pointing at this server instead of port 29777.
    const answer = protocol.decodeBrochureAnswer(serverMain[0]!);
    main.write(onTheWire([protocol.encodeBrochureAnswer({ ...answer, address: `127.0.0.1:${port}` })]));

    const byFirstFrame = new Map<string, RawSocket>();
    for (const i of [1, 2]) {
      const s = await nextSocket(i);
      byFirstFrame.set(hex(await s.readFrame()), s);
    }
    expect([...byFirstFrame.keys()].sort()).toEqual([hex(replyFirst[0]!), hex(clientChannel[0]!)].sort());
    const channel = byFirstFrame.get(hex(clientChannel[0]!))!;
    const pipe = await connecting;
    expect(pipe.transport).toBe("uv");
    expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("basic");

    for (let i = 0; i < ROUND_TRIPS; i++) {
      const wrote = pipe.write({
        metadata: "BBB",
        payloads: [{ data: payload }],
        tensors: [{ buffer: tensor, targetDevice: CPU_DEVICE }],
      });
      expect(hex(await main.readFrame())).toBe(hex(clientMain[2 + 2 * i]!));
      expect(hex(await main.readFrame())).toBe(hex(clientMain[3 + 2 * i]!));
      expect(hex(await channel.readFrame())).toBe(hex(clientChannel[1 + i]!));
      await wrote;
      main.write(onTheWire([serverMain[1 + 2 * i]!, serverMain[2 + 2 * i]!]));
      channel.write(onTheWire([serverChannel[i]!]));
      const echo = await pipe.readMessage();
      expect(echo.metadata).toBe("");
      expect([...echo.payloads[0]!.data]).toEqual([...payload]);
      expect([...(echo.tensors[0]!.buffer as Uint8Array)]).toEqual([...tensor]);
    }
    pipe.close();
  });

  it("our listener answers the C++ client byte for byte like the C++ server", async () => {
    const context = await createContext({ transports: ["uv"], channels: ["basic"] });
    cleanup.push(() => context.close());
    const listener = await context.listen("uv://127.0.0.1:0");
    const port = Number(listener.addresses()[0]!.split(":").at(-1));
    // The C++ benchmark's server: echo each message with empty metadata.
    const serving = (async () => {
      const pipe: Pipe = await listener.accept();
      for (let i = 0; i < ROUND_TRIPS; i++) {
        const m = await pipe.readMessage();
        await pipe.write({
          metadata: "",
          payloads: m.payloads.map((p) => ({ data: p.data })),
          tensors: m.tensors.map((t) => ({ buffer: t.buffer, targetDevice: CPU_DEVICE })),
        });
      }
      return pipe;
    })();

    const main = await RawSocket.connect(port);
    cleanup.push(() => main.socket.destroy());
    main.write(onTheWire([clientMain[0]!, clientMain[1]!]));
    const answerBytes = await main.readFrame();
    const answer = protocol.decodeBrochureAnswer(answerBytes);
    expect(answer.address).toBe(`127.0.0.1:${port}`);
    // Apart from the address, the very bytes the C++ server sent.
    expect(hex(protocol.encodeBrochureAnswer({ ...answer, address: "127.0.0.1:29777" }))).toBe(hex(serverMain[0]!));

    const reply = await RawSocket.connect(port);
    const channel = await RawSocket.connect(port);
    cleanup.push(() => reply.socket.destroy(), () => channel.socket.destroy());
    reply.write(onTheWire([replyFirst[0]!]));
    channel.write(onTheWire([clientChannel[0]!]));

    for (let i = 0; i < ROUND_TRIPS; i++) {
      main.write(onTheWire([clientMain[2 + 2 * i]!, clientMain[3 + 2 * i]!]));
      channel.write(onTheWire([clientChannel[1 + i]!]));
      expect(hex(await main.readFrame())).toBe(hex(serverMain[1 + 2 * i]!));
      expect(hex(await main.readFrame())).toBe(hex(serverMain[2 + 2 * i]!));
      expect(hex(await channel.readFrame())).toBe(hex(serverChannel[i]!));
    }
    (await serving).close();
  });
});
