/**
 * Interoperability with C++ TensorPipe, played from the bytes it put on the
 * wire (the captures in @tensorpipe/core's fixtures/upstream): our client
 * against the captured server, and the captured client against our
 * listener, over real sockets. Every byte we send must equal the capture,
 * frame for frame on every connection.
 */
import { type AddressInfo, type Server, createServer } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { CPU_DEVICE, type Context, type Message, type Pipe } from "@tensorpipe/core";
import { protocol, onTheWire, upstreamSession } from "@tensorpipe/core/testing";
import { afterEach, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { RawSocket } from "./raw-socket.js";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const frames = (list: readonly Uint8Array[]) => list.map(hex);
const basic = upstreamSession("basic");
const edge = upstreamSession("edge");
const ROUND_TRIPS = 6;

/** A listening node:net server standing in for the C++ listener; sockets are taken in accept order. */
class CppListenerStandIn {
  private readonly accepted: RawSocket[] = [];
  private readonly arrivals: (() => void)[] = [];
  private readonly server: Server;

  constructor() {
    this.server = createServer((s) => {
      this.accepted.push(new RawSocket(s));
      this.arrivals.shift()?.();
    }).listen(0, "127.0.0.1");
  }

  async port(): Promise<number> {
    if (!this.server.listening) await new Promise((r) => this.server.once("listening", r));
    return (this.server.address() as AddressInfo).port;
  }

  async socket(i: number): Promise<RawSocket> {
    while (this.accepted.length <= i) await new Promise<void>((r) => this.arrivals.push(r));
    return this.accepted[i]!;
  }

  close(): Promise<void> {
    for (const s of this.accepted) s.socket.destroy();
    return new Promise((r) => this.server.close(() => r()));
  }
}

/**
 * Our client's handshake against the captured server: checks the hello and
 * brochure, answers with the captured BrochureAnswer (pointing here), and
 * tells the reply and channel connections apart by their first frame.
 */
async function connectOurClient(context: Context, standIn: CppListenerStandIn, session: typeof basic) {
  const port = await standIn.port();
  const connecting = context.connect(`uv://127.0.0.1:${port}`);
  const main = await standIn.socket(0);
  expect(hex(await main.readFrame())).toBe(hex(session.clientMain[0]!));
  // Apart from the path report, which asks a listener of ours for its
  // reasons and which upstream passes over, the very bytes the C++ client sent.
  const brochure = protocol.decodeBrochure(await main.readFrame());
  expect([...brochure.channelDeviceDescriptors.keys()].filter((name) => name.startsWith("tensorpipe-js."))).toEqual(["tensorpipe-js.path-report"]);
  brochure.channelDeviceDescriptors.delete("tensorpipe-js.path-report");
  expect(hex(protocol.encodeBrochure(brochure))).toBe(hex(session.clientMain[1]!));
  const answer = protocol.decodeBrochureAnswer(session.serverMain[0]!);
  main.write(onTheWire([protocol.encodeBrochureAnswer({ ...answer, address: `127.0.0.1:${port}` })]));

  const byFirstFrame = new Map<string, RawSocket>();
  for (const i of [1, 2]) {
    const s = await standIn.socket(i);
    byFirstFrame.set(hex(await s.readFrame()), s);
  }
  expect([...byFirstFrame.keys()].sort()).toEqual([hex(session.clientReply[0]!), hex(session.clientChannel[0]!)].sort());
  const pipe = await connecting;
  expect(pipe.transport).toBe("uv");
  expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("basic");
  return {
    pipe,
    main,
    reply: byFirstFrame.get(hex(session.clientReply[0]!))!,
    channel: byFirstFrame.get(hex(session.clientChannel[0]!))!,
  };
}

/** The captured client against our listener, up to its reply and channel connections. */
async function connectCapturedClient(port: number, session: typeof basic) {
  const main = await RawSocket.connect(port);
  main.write(onTheWire([session.clientMain[0]!, session.clientMain[1]!]));
  const answer = protocol.decodeBrochureAnswer(await main.readFrame());
  expect(answer.address).toBe(`127.0.0.1:${port}`);
  // Apart from the address and the registration ids (random here, a
  // counter upstream), the very bytes the C++ server sent.
  const captured = protocol.decodeBrochureAnswer(session.serverMain[0]!);
  const asCaptured = {
    ...answer,
    address: `127.0.0.1:${session.serverPort}`,
    transportRegistrationIds: captured.transportRegistrationIds,
    channelRegistrationIds: captured.channelRegistrationIds,
  };
  expect(hex(protocol.encodeBrochureAnswer(asCaptured))).toBe(hex(session.serverMain[0]!));
  const replyId = answer.transportRegistrationIds.get(protocol.ConnectionKind.REPLY)!;
  const channelId = answer.channelRegistrationIds.get("basic")![0]!;
  expect(replyId).not.toBe(channelId);
  // The captured client's packets, with the ids this listener gave.
  expect(protocol.decodePacket(session.clientReply[0]!)).toEqual({ kind: "requested", registrationId: captured.transportRegistrationIds.get(1) });
  const reply = await RawSocket.connect(port);
  const channel = await RawSocket.connect(port);
  reply.write(onTheWire([protocol.encodePacket({ kind: "requested", registrationId: replyId })]));
  channel.write(onTheWire([protocol.encodePacket({ kind: "requested", registrationId: channelId })]));
  return { main, reply, channel };
}

async function readFrames(socket: RawSocket, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(hex(await socket.readFrame()));
  return out;
}

/** What the edge session's C++ server did: echo each message, naming cpu:0 as every tensor's target. */
async function echoWithTargets(pipe: Pipe, messages: number): Promise<void> {
  for (let i = 0; i < messages; i++) {
    const m = await pipe.readMessage();
    await pipe.write({
      metadata: m.metadata,
      payloads: m.payloads.map((p) => ({ data: p.data, metadata: p.metadata })),
      tensors: m.tensors.map((t) => ({ buffer: t.buffer, metadata: t.metadata, targetDevice: CPU_DEVICE })),
    });
  }
}

const bytes = (...b: number[]) => Uint8Array.from(b);
/** The edge session's three messages, as the C++ client wrote them. */
const edgeMessages: Message[] = [
  {
    metadata: "Z",
    payloads: [
      { data: new Uint8Array(0), metadata: "p0" },
      { data: bytes(0x07, 0x8a, 0x0d), metadata: "p1" },
    ],
    tensors: [
      { buffer: new Uint8Array(0), metadata: "t2", targetDevice: CPU_DEVICE },
      { buffer: bytes(0x15, 0x98, 0x1b, 0x9e, 0x21), metadata: "t3", targetDevice: CPU_DEVICE },
      { buffer: new Uint8Array(0), metadata: "t4", targetDevice: CPU_DEVICE },
    ],
  },
  // Left to the receiver (null), as the C++ client wrote it: no target device, a DescriptorReply.
  { metadata: "R", tensors: [{ buffer: bytes(0x07, 0x8a, 0x0d, 0x90), metadata: "t0", targetDevice: null }] },
  {},
];

describe("interoperability with upstream C++ TensorPipe (captured bytes)", () => {
  const cleanup: (() => unknown)[] = [];
  afterEach(async () => {
    for (const f of cleanup.splice(0).reverse()) await f();
  });

  async function uvBasicContext(): Promise<Context> {
    const context = await createContext({ transports: ["uv"], channels: ["basic"] });
    cleanup.push(() => context.close());
    return context;
  }

  function standIn(): CppListenerStandIn {
    const s = new CppListenerStandIn();
    cleanup.push(() => s.close());
    return s;
  }

  it("our client speaks byte for byte like the C++ client to a C++ server, the path report aside", async () => {
    const { pipe, main, channel } = await connectOurClient(await uvBasicContext(), standIn(), basic);
    const payload = bytes(0, 1, 2, 3, 4);
    const tensor = bytes(0, 1, 2, 3, 4, 5, 6, 7);
    for (let i = 0; i < ROUND_TRIPS; i++) {
      const wrote = pipe.write({
        metadata: "BBB",
        payloads: [{ data: payload }],
        tensors: [{ buffer: tensor, targetDevice: CPU_DEVICE }],
      });
      expect(await readFrames(main, 2)).toEqual(frames(basic.clientMain.slice(2 + 2 * i, 4 + 2 * i)));
      expect(hex(await channel.readFrame())).toBe(hex(basic.clientChannel[1 + i]!));
      await wrote;
      main.write(onTheWire([basic.serverMain[1 + 2 * i]!, basic.serverMain[2 + 2 * i]!]));
      channel.write(onTheWire([basic.serverChannel[i]!]));
      const echo = await pipe.readMessage();
      expect(echo.metadata).toBe("");
      expect([...echo.payloads[0]!.data]).toEqual([...payload]);
      expect([...(echo.tensors[0]!.buffer as Uint8Array)]).toEqual([...tensor]);
    }
    pipe.close();
  });

  it("our listener answers the C++ client byte for byte like the C++ server", async () => {
    const listener = await (await uvBasicContext()).listen("uv://127.0.0.1:0");
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
    serving.catch(() => undefined);

    const { main, reply, channel } = await connectCapturedClient(port, basic);
    cleanup.push(() => [main, reply, channel].forEach((s) => s.socket.destroy()));
    for (let i = 0; i < ROUND_TRIPS; i++) {
      main.write(onTheWire([basic.clientMain[2 + 2 * i]!, basic.clientMain[3 + 2 * i]!]));
      channel.write(onTheWire([basic.clientChannel[1 + i]!]));
      expect(await readFrames(main, 2)).toEqual(frames(basic.serverMain.slice(1 + 2 * i, 3 + 2 * i)));
      expect(hex(await channel.readFrame())).toBe(hex(basic.serverChannel[i]!));
    }
    (await serving).close();
  });

  it("edge cases, our client: zero-length payloads and tensors, a DescriptorReply, an empty message", async () => {
    const { pipe, main, reply, channel } = await connectOurClient(await uvBasicContext(), standIn(), edge);

    // 1: a zero-length payload is a frame of length 0; zero-length tensors put nothing on the channel.
    let wrote = pipe.write(edgeMessages[0]!);
    expect(await readFrames(main, 3)).toEqual(frames(edge.clientMain.slice(2, 5)));
    expect(hex(await channel.readFrame())).toBe(hex(edge.clientChannel[1]!));
    await wrote;
    main.write(onTheWire(edge.serverMain.slice(1, 4)));
    channel.write(onTheWire([edge.serverChannel[0]!]));
    const echo1 = await pipe.readMessage();
    expect(echo1.metadata).toBe("Z");
    expect(echo1.payloads.map((p) => [p.metadata, hex(p.data)])).toEqual([
      ["p0", ""],
      ["p1", "078a0d"],
    ]);
    expect(echo1.tensors.map((t) => [t.metadata, hex(t.buffer as Uint8Array)])).toEqual([
      ["t2", ""],
      ["t3", "15981b9e21"],
      ["t4", ""],
    ]);

    // 2: a tensor without a target waits for the server's DescriptorReply.
    wrote = pipe.write(edgeMessages[1]!);
    expect(hex(await main.readFrame())).toBe(hex(edge.clientMain[5]!));
    await sleep(50);
    expect(channel.unread).toBe(0);
    reply.write(onTheWire([edge.serverReply[0]!]));
    expect(hex(await channel.readFrame())).toBe(hex(edge.clientChannel[2]!));
    await wrote;
    main.write(onTheWire([edge.serverMain[4]!]));
    channel.write(onTheWire([edge.serverChannel[1]!]));
    const echo2 = await pipe.readMessage();
    expect(echo2.tensors.map((t) => [t.metadata, hex(t.buffer as Uint8Array)])).toEqual([["t0", "078a0d90"]]);

    // 3: an empty message is its descriptor alone.
    wrote = pipe.write(edgeMessages[2]!);
    expect(hex(await main.readFrame())).toBe(hex(edge.clientMain[6]!));
    await wrote;
    main.write(onTheWire([edge.serverMain[5]!]));
    const echo3 = await pipe.readMessage();
    expect(echo3).toMatchObject({ metadata: "", payloads: [], tensors: [] });

    // Nothing beyond the capture: the echoes had targets, so no DescriptorReply from us.
    await sleep(50);
    expect([main.unread, reply.unread, channel.unread]).toEqual([0, 0, 0]);
    pipe.close();
  });

  it("edge cases, our listener: answers the C++ client's edge session as the C++ server did", async () => {
    const listener = await (await uvBasicContext()).listen("uv://127.0.0.1:0");
    const port = Number(listener.addresses()[0]!.split(":").at(-1));
    const serving = (async () => {
      const pipe = await listener.accept();
      await echoWithTargets(pipe, edgeMessages.length);
      return pipe;
    })();
    // A failure there shows here as frames that never come; it is awaited below.
    serving.catch(() => undefined);

    const { main, reply, channel } = await connectCapturedClient(port, edge);
    cleanup.push(() => [main, reply, channel].forEach((s) => s.socket.destroy()));

    main.write(onTheWire(edge.clientMain.slice(2, 5)));
    channel.write(onTheWire([edge.clientChannel[1]!]));
    expect(await readFrames(main, 3)).toEqual(frames(edge.serverMain.slice(1, 4)));
    expect(hex(await channel.readFrame())).toBe(hex(edge.serverChannel[0]!));

    main.write(onTheWire([edge.clientMain[5]!]));
    expect(hex(await reply.readFrame())).toBe(hex(edge.serverReply[0]!));
    channel.write(onTheWire([edge.clientChannel[2]!]));
    expect(hex(await main.readFrame())).toBe(hex(edge.serverMain[4]!));
    expect(hex(await channel.readFrame())).toBe(hex(edge.serverChannel[1]!));

    main.write(onTheWire([edge.clientMain[6]!]));
    expect(hex(await main.readFrame())).toBe(hex(edge.serverMain[5]!));
    const pipe = await serving;
    await sleep(50);
    expect([main.unread, reply.unread, channel.unread]).toEqual([0, 0, 0]);
    pipe.close();
  });
});
