/**
 * The mistakes a user makes in the first hour get a TensorPipeError that
 * says what was wrong and how to fix it, and leave the pipe usable.
 */
import { type Allocation, CPU_DEVICE, Context, ErrorCode, type Message, type Pipe } from "@tensorpipe/core";
import { type AddressInfo, createServer } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerCmaChannel } from "@tensorpipe/channel-cma";
import { registerShmTransport } from "@tensorpipe/transport-shm";
import { registerUvTransport } from "@tensorpipe/transport-uv";

/** A view whose ArrayBuffer went to another thread: it reads as empty. */
function transferred(): Uint8Array {
  const view = new Uint8Array(64);
  structuredClone(view.buffer, { transfer: [view.buffer] });
  return view;
}

describe("misuse of write() and read()", () => {
  let server: Context;
  let client: Context;
  let here: Pipe;
  let there: Pipe;

  beforeAll(async () => {
    server = await createContext({ transports: ["uv"], channels: ["basic"], maxControlFrameLength: 64 * 1024 });
    client = await createContext({ transports: ["uv"], channels: ["basic"], maxControlFrameLength: 64 * 1024 });
    const listener = await server.listen("uv://127.0.0.1:0");
    [here, there] = await Promise.all([client.connect(listener.addresses()[0]!), listener.accept()]);
  });
  afterAll(async () => {
    await client.close();
    await server.close();
  });

  /** Still a working pipe: one message goes through. */
  async function stillWorks(): Promise<void> {
    await here.write({ metadata: "ok", tensors: [{ buffer: new Uint8Array(4), targetDevice: CPU_DEVICE }] });
    expect((await there.readMessage()).metadata).toBe("ok");
  }

  it.each([
    ["no message", undefined, /write\(\) takes a message object \{ metadata\?, payloads\?, tensors\? \}, got undefined$/],
    ["a payload without data", { payloads: [{ metadata: "m" }] }, /payload 0: data must be a TypedArray or DataView; got undefined$/],
    ["an array as the message", [], /write\(\) takes a message object \{ metadata\?, payloads\?, tensors\? \}, got an Array/],
    ["a number as metadata", { metadata: 5 }, /metadata must be a string, got number 5/],
    [
      "an ArrayBuffer as a tensor",
      { tensors: [{ buffer: new ArrayBuffer(8) }] },
      /tensor 0: buffer must be a TypedArray, DataView or CudaBuffer; got an ArrayBuffer: wrap it in new Uint8Array/,
    ],
    [
      "an array of numbers as a tensor",
      { tensors: [{ buffer: [1, 2, 3] }] },
      /tensor 0: .* got an Array: make it a TypedArray, e\.g\. new Float32Array\(values\)/,
    ],
    ["a tensor that is not an object", { tensors: [new Uint8Array(4)] }, /tensor 0 must be an object \{ buffer, length\?/],
    [
      "a length past the buffer",
      { tensors: [{ buffer: new Uint8Array(4), length: 5 }] },
      /tensor 0: length must be a whole number of bytes from 0 to its buffer's 4, got 5/,
    ],
    ["a bad target device", { tensors: [{ buffer: new Uint8Array(4), targetDevice: "cpu" }] }, /tensor 0: targetDevice must be \{ type, index \}/],
    [
      "an ArrayBuffer as a payload",
      { payloads: [{ data: new ArrayBuffer(8) }] },
      /payload 0: data must be a TypedArray or DataView; got an ArrayBuffer: wrap it/,
    ],
    ["tensors that are not an array", { tensors: new Uint8Array(4) }, /tensors must be an array/],
    [
      "a tensor whose memory was transferred away",
      { tensors: [{ buffer: transferred() }] },
      /tensor 0: its memory is detached \(a pipe.loan\(\) already written or given back, a received message's view after release\(\), or an ArrayBuffer transferred to another thread\), so it would go as empty/,
    ],
    ["a payload whose memory was transferred away", { payloads: [{ data: transferred() }] }, /payload 0: its memory is detached/],
    [
      "an object that names the CPU as a tensor",
      { tensors: [{ buffer: { device: { type: "cpu", index: 0 }, byteLength: 8 } }] },
      /tensor 0: buffer is an object that names the CPU as its device but is no memory/,
    ],
  ])("%s is ERR_TP_INVALID_ARG saying how to fix it", async (_, message, text) => {
    await expect(here.write(message as unknown as Message)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(text) });
    await stillWorks();
  });

  it.each([
    ["no allocation", undefined, /read\(\) takes an allocation \{ payloads\?: \[\{ data \}\], tensors\?: \[\{ buffer \}\] \}/],
    ["too few tensors", { payloads: [{ data: new Uint8Array(3) }] }, /the allocation has 1 payload\(s\) and 0 tensor\(s\); the message has 1 and 1/],
    [
      "an ArrayBuffer as payload data",
      { payloads: [{ data: new ArrayBuffer(3) }], tensors: [{ buffer: new Uint8Array(4) }] },
      /allocation payload 0: data must be a TypedArray or DataView of 3 bytes; got an ArrayBuffer: wrap it/,
    ],
    [
      "a buffer given as the tensor",
      { payloads: [{ data: new Uint8Array(3) }], tensors: [new Uint8Array(4)] },
      /allocation tensor 0 must be an object \{ buffer \}, got a Uint8Array itself: pass \{ buffer: it \}/,
    ],
    [
      "an array as a tensor buffer",
      { payloads: [{ data: new Uint8Array(3) }], tensors: [{ buffer: [0, 0, 0, 0] }] },
      /allocation tensor 0: buffer must be .* of at least 4 bytes; got an Array: make it a TypedArray/,
    ],
    ["a tensor buffer too small", { payloads: [{ data: new Uint8Array(3) }], tensors: [{ buffer: new Uint8Array(2) }] }, /tensor 0 needs 4 bytes, got 2/],
    [
      "an object that names the CPU as a tensor buffer",
      { payloads: [{ data: new Uint8Array(3) }], tensors: [{ buffer: { device: { type: "cpu", index: 0 }, byteLength: 4 } }] },
      /allocation tensor 0: buffer is an object that names the CPU/,
    ],
  ])("read() with %s is ERR_TP_INVALID_ARG saying how to fix it, and the message can still be read", async (_, allocation, text) => {
    await here.write({ payloads: [{ data: new Uint8Array([1, 2, 3]) }], tensors: [{ buffer: new Uint8Array([4, 5, 6, 7]) }] });
    await there.readDescriptor();
    await expect(there.read(allocation as unknown as Allocation)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(text) });
    const [data, buffer] = [new Uint8Array(3), new Uint8Array(4)];
    await there.read({ payloads: [{ data }], tensors: [{ buffer }] });
    expect([...data, ...buffer]).toEqual([1, 2, 3, 4, 5, 6, 7]);
    await stillWorks();
  });

  it("read() may leave out the payloads or tensors a message does not have", async () => {
    await here.write({ tensors: [{ buffer: new Uint8Array([9, 8]) }] });
    await there.readDescriptor();
    const buffer = new Uint8Array(2);
    await there.read({ tensors: [{ buffer }] });
    expect([...buffer]).toEqual([9, 8]);
    await here.write({ metadata: "bare" });
    expect((await there.readDescriptor()).metadata).toBe("bare");
    await there.read({});
    await stillWorks();
  });

  it("metadata past the control-frame limit is refused at write(), naming the option, before it reaches the peer", async () => {
    await expect(here.write({ metadata: "x".repeat(100 * 1024) })).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(/over the limit of 65536 \(ContextOptions\.maxControlFrameLength/),
    });
    await stillWorks();
  });

  it.each(["readDescriptor", "readMessage"] as const)(
    "%s() after readDescriptor() and before read() is refused at once, saying which came first",
    async (op) => {
      await here.write({ metadata: "one" });
      await there.readDescriptor();
      await expect(there[op]()).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
        message: `${op}() while the descriptor readDescriptor() gave is unread: read() that message first`,
      });
      await there.read({ payloads: [], tensors: [] });
      await stillWorks();
    },
  );

  it("a CPU tensor written without targetDevice goes to the peer's CPU: the write resolves before anyone reads, no round trip", async () => {
    const sent = here.write({ tensors: [{ buffer: new Float32Array([1, 2, 3]) }] });
    await expect(Promise.race([sent.then(() => "written"), new Promise((r) => setTimeout(() => r("still waiting"), 2000))])).resolves.toBe("written");
    const d = await there.readDescriptor();
    expect(d.tensors[0]!.targetDevice).toEqual(CPU_DEVICE);
    const into = new Float32Array(3);
    await there.read({ payloads: [], tensors: [{ buffer: into }] });
    expect([...into]).toEqual([1, 2, 3]);
  });

  it("targetDevice: null leaves the tensor to the reader, which answers before the bytes move", async () => {
    let written = false;
    const sent = here.write({ tensors: [{ buffer: new Uint8Array(4), targetDevice: null }] }).then(() => (written = true));
    const d = await there.readDescriptor();
    expect(d.tensors[0]!.targetDevice).toBeUndefined();
    expect(written).toBe(false);
    await there.read({ payloads: [], tensors: [{ buffer: new Uint8Array(4) }] });
    await sent;
  });

  const badOptions: [string, unknown, RegExp][] = [
    ["a negative timeout", { timeout: -1 }, /timeout must be a number of milliseconds from 0 to 2147483647 .*got number -1/],
    ["a timeout past what a timer holds", { timeout: 2 ** 31 + 5 }, /timeout must be .*got number 2147483653/],
    ["a string timeout", { timeout: "100" }, /timeout must be .*got the string "100"/],
    ["a NaN timeout", { timeout: NaN }, /timeout must be .*got number NaN/],
    ["a signal that is none", { signal: {} }, /signal must be an AbortSignal .*got an object \(no keys\)/],
    ["options that are null", null, /options must be an object such as \{ timeout: 5000, signal \}, got null/],
    [
      "a signal made from AbortSignal's prototype",
      { signal: Object.create(AbortSignal.prototype) },
      /signal must be an AbortSignal .*got an object that only looks like one/,
    ],
  ];

  it.each(badOptions)(
    "%s is ERR_TP_INVALID_ARG from every operation, which does nothing: the pipe, its messages and the listener go on",
    async (_, options, text) => {
      const bad = options as never;
      const refused = { code: ErrorCode.INVALID_ARG, message: expect.stringMatching(text) };
      // Rejected, never thrown: each call is a promise.
      let calls: Promise<unknown>[] = [];
      expect(() => {
        calls = [here.write({ metadata: "not sent" }, bad), there.readDescriptor(bad), there.readMessage(bad), client.connect("uv://127.0.0.1:1", bad)];
      }).not.toThrow();
      for (const c of calls) await expect(c).rejects.toMatchObject(refused);
      await here.write({ metadata: "sent" });
      expect((await there.readMessage()).metadata).toBe("sent");
      const d = here.write({ metadata: "read", tensors: [{ buffer: new Uint8Array(4), targetDevice: CPU_DEVICE }] });
      await there.readDescriptor();
      await expect(there.read({ payloads: [], tensors: [{ buffer: new Uint8Array(4) }] }, bad)).rejects.toMatchObject(refused);
      await there.read({ payloads: [], tensors: [{ buffer: new Uint8Array(4) }] });
      await d;
      await stillWorks();
    },
  );

  it("a timeout of Infinity, or a fraction of a millisecond, is taken", async () => {
    await Promise.all([
      here.write({ metadata: "inf" }, { timeout: Infinity }),
      expect(there.readMessage({ timeout: 2.5e3 + 0.5 })).resolves.toMatchObject({ metadata: "inf" }),
    ]);
  });

  it("a signal aborted already fails the operation before it does anything: nothing is sent or read, and the pipe goes on", async () => {
    const aborted = { signal: AbortSignal.abort(new Error("never mind")) };
    await expect(here.write({ metadata: "not sent" }, aborted)).rejects.toMatchObject({
      code: ErrorCode.ABORTED,
      message: expect.stringMatching(/never mind/),
    });
    await expect(there.readDescriptor(aborted)).rejects.toMatchObject({ code: ErrorCode.ABORTED });
    await expect(there.readMessage(aborted)).rejects.toMatchObject({ code: ErrorCode.ABORTED });
    const sent = here.write({ metadata: "sent", tensors: [{ buffer: new Uint8Array([9, 9, 9, 9]), targetDevice: CPU_DEVICE }] });
    expect((await there.readDescriptor()).metadata).toBe("sent");
    const buffer = new Uint8Array(4);
    await expect(there.read({ payloads: [], tensors: [{ buffer }] }, aborted)).rejects.toMatchObject({ code: ErrorCode.ABORTED });
    expect([...buffer]).toEqual([0, 0, 0, 0]);
    await there.read({ payloads: [], tensors: [{ buffer }] });
    expect([...buffer]).toEqual([9, 9, 9, 9]);
    await sent;
    await stillWorks();
  });

  it("an abort in the same turn as a call that finished at once comes too late: the write is sent, the descriptor taken, the pipe goes on", async () => {
    const controller = new AbortController();
    const written = here.write({ metadata: "sent at once" }, { signal: controller.signal });
    controller.abort();
    await expect(written).resolves.toBeUndefined();
    // The message is here before readDescriptor is called.
    await new Promise((r) => setTimeout(r, 50));
    const late = new AbortController();
    const got = there.readDescriptor({ signal: late.signal });
    late.abort();
    await expect(got).resolves.toMatchObject({ metadata: "sent at once" });
    await there.read({});
    await stillWorks();
  });

  it("readMessage() names itself in its errors", async () => {
    await expect(there.readMessage({ timeout: 0 })).rejects.toMatchObject({ code: ErrorCode.TIMEOUT, message: "readMessage timed out" });
    await stillWorks();
  });

  it("keeps the reason an abort was given as the cause, and says it", async () => {
    const controller = new AbortController();
    const reason = new Error("shutting down");
    const waiting = there.readDescriptor({ signal: controller.signal });
    controller.abort(reason);
    await expect(waiting).rejects.toMatchObject({ code: ErrorCode.ABORTED, message: expect.stringMatching(/shutting down/), cause: reason });
    await stillWorks();
  });
});

describe("misuse of lent memory", () => {
  it("a received view written back after release() is ERR_TP_INVALID_ARG saying to copy what is kept first; the pipe goes on", async () => {
    const [server, client] = [await createContext({ transports: ["shm"], channels: ["cma"] }), await createContext({ transports: ["shm"], channels: ["cma"] })];
    try {
      const listener = await server.listen("shm://*");
      const [here, there] = await Promise.all([client.connect(listener.addresses()[0]!), listener.accept()]);
      const loan = await here.loan(1024 * 1024);
      await here.write({ tensors: [{ buffer: loan }] });
      const m = await there.readMessage();
      const view = m.tensors[0]!.buffer as Uint8Array;
      m.release();
      await expect(there.write({ tensors: [{ buffer: view }] })).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
        message: expect.stringMatching(
          /tensor 0: its memory is detached \(.*a received message's view after release\(\).*copy what you keep of a message before releasing it/,
        ),
      });
      await there.write({ metadata: "ok" });
      expect((await here.readMessage()).metadata).toBe("ok");
    } finally {
      await client.close();
      await server.close();
    }
  });
});

describe("releasing a lent view that a write still sends", () => {
  it("gives the memory back once the write is over: the write's reader gets what was written, not the lender's next loan", async () => {
    const [lender, borrower] = [new Context(), new Context()];
    for (const c of [lender, borrower]) {
      registerShmTransport(c);
      // One slot: the lender's next loan can only be the memory it lent.
      registerCmaChannel(c, { poolBytes: 8 * 1024 * 1024 });
    }
    try {
      const listener = await lender.listen("shm://*");
      const [b, a] = await Promise.all([borrower.connect(listener.addresses()[0]!), listener.accept()]);
      const loan = (await a.loan(8 * 1024 * 1024)).fill(42);
      await a.write({ tensors: [{ buffer: loan }] });
      const m = await b.readMessage();
      // Sent back from where it was lent (by address), and released before the write resolves.
      const back = b.write({ tensors: [{ buffer: m.tensors[0]!.buffer }] });
      m.release();
      await new Promise((r) => setTimeout(r, 50));
      const next = a.loan(8 * 1024 * 1024, { timeout: 5000 }).then((view) => view.fill(7));
      const echoed = await a.readMessage();
      const got = echoed.tensors[0]!.buffer as Uint8Array;
      expect(got.every((byte) => byte === 42)).toBe(true);
      echoed.release();
      await back;
      // The slot comes back once the write is over.
      expect((await next).byteLength).toBe(8 * 1024 * 1024);
    } finally {
      await borrower.close();
      await lender.close();
    }
  });
});

describe("misuse of ContextOptions", () => {
  it.each([
    [{ handshakeTimeout: 2 ** 32 }, "ContextOptions.handshakeTimeout must be a whole number of ms from 1 to 2147483647, got number 4294967296"],
    [{ handshakeTimeout: "5000" }, 'ContextOptions.handshakeTimeout must be a whole number of ms from 1 to 2147483647, got the string "5000"'],
    [{ name: 5 }, "ContextOptions.name must be a string, got number 5"],
    [{ maxPayloads: "10" }, 'ContextOptions.maxPayloads must be a whole number from 1 to 9007199254740991, got the string "10"'],
    [{ flightRecorder: -1 }, "ContextOptions.flightRecorder must be a whole number of events from 0 to 1000000, got number -1"],
    ["fast", 'ContextOptions must be an object, got the string "fast"'],
  ])("%j is refused with ERR_TP_INVALID_ARG saying what it takes", (options, message) => {
    expect(() => new Context(options as never)).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG, message }));
  });
});

describe("misuse of the backends' register functions and of channelFor()", () => {
  it.each([
    [
      "no context",
      () => registerShmTransport(undefined as never),
      /registering the shm transport: context must be a Context \(new Context\(\)\), got undefined/,
    ],
    ["a plain object as the context", () => registerBasicChannel({} as never), /registering the basic channel: context must be a Context/],
    [
      "a string as the options",
      () => registerBasicChannel(new Context(), "x" as never),
      /registering the basic channel: options must be an object of its options, or left out; got the string "x"/,
    ],
    ["null as the options", () => registerUvTransport(new Context(), null as never), /registering the uv transport: options must be an object/],
  ])("%s is ERR_TP_INVALID_ARG saying what it takes", (_, call, message) => {
    expect(call).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(message) }));
  });

  it("channelFor() with something that is no device is ERR_TP_INVALID_ARG", async () => {
    const [a, b] = [await createContext({ transports: ["uv"], channels: ["basic"] }), await createContext({ transports: ["uv"], channels: ["basic"] })];
    const listener = await b.listen("uv://127.0.0.1:0");
    const [pipe] = await Promise.all([a.connect(listener.addresses()[0]!), listener.accept()]);
    expect(() => pipe.channelFor(null as never, CPU_DEVICE)).toThrow(
      expect.objectContaining({
        code: ErrorCode.INVALID_ARG,
        message: expect.stringMatching(/channelFor\(local, remote\): local must be a device \{ type, index \}/),
      }),
    );
    expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("basic");
    await a.close();
    await b.close();
  });
});

describe("misuse of listen(), accept() and connect()", () => {
  let server: Context;
  let client: Context;
  beforeAll(async () => {
    server = await createContext({ transports: ["uv"], channels: ["basic"] });
    client = await createContext({ transports: ["uv"], channels: ["basic"] });
  });
  afterAll(async () => {
    await client.close();
    await server.close();
  });

  it.each([
    ["no URL", undefined, /listen\(\) takes a URL or an array of URLs, .* got undefined/],
    ["an empty array", [], /listen\(\) takes a URL or an array of URLs, .* got an empty array/],
    ["a number in the array", [4000], /a URL must be a string of the form scheme:\/\/address .*got number/],
  ])("listen() with %s is ERR_TP_INVALID_ARG saying what it takes", async (_, urls, text) => {
    await expect(server.listen(urls as never)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(text) });
  });

  it("listener.url() is the URL of the transport asked for, or the first; another is ERR_TP_INVALID_ARG naming those it listens on", async () => {
    const listener = await server.listen("uv://127.0.0.1:0");
    expect(listener.url()).toBe(listener.addresses()[0]);
    expect(listener.url("uv")).toBe(listener.addresses()[0]);
    expect(() => listener.url("shm")).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: 'this listener does not listen on transport "shm" (it listens on uv)' }),
    );
    expect(listener.url("UV")).toBe(listener.addresses()[0]);
    expect(() => listener.url(null as never)).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(/got null/) }));
    listener.close();
    const byAlias = await server.listen("tcp://127.0.0.1:0");
    expect(byAlias.url("tcp")).toBe(byAlias.url("uv"));
    expect(byAlias.url()).toMatch(/^tcp:\/\//);
    byAlias.close();
  });

  it("accept() with bad options or a signal aborted already is refused without taking a pipe: the next accept() gets it", async () => {
    const listener = await server.listen("uv://127.0.0.1:0");
    await expect(listener.accept({ timeout: -1 })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    await expect(listener.accept({ signal: AbortSignal.abort() })).rejects.toMatchObject({ code: ErrorCode.ABORTED });
    const [dialled, accepted] = await Promise.all([client.connect(listener.addresses()[0]!), listener.accept({ timeout: 5000 })]);
    await dialled.write({ metadata: "to the accepted pipe" });
    expect((await accepted.readMessage()).metadata).toBe("to the accepted pipe");
    listener.close();
  });

  it.each([
    ["an HTTP server", "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n"],
    ["an echo of what it got", undefined],
  ])("connect() to %s is ERR_TP_PROTOCOL asking whether the address is a TensorPipe listener's", async (_, reply) => {
    const server = createServer((s) => {
      s.on("error", () => undefined);
      s.once("data", (d) => s.write(reply ?? d));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      await expect(client.connect(`uv://127.0.0.1:${(server.address() as AddressInfo).port}`)).rejects.toMatchObject({
        code: ErrorCode.PROTOCOL,
        message: expect.stringMatching(/^the answer is not a TensorPipe listener's: is this the address of one\?/),
      });
    } finally {
      server.close();
    }
  });

  it("a tensor on a pipe without a channel (none registered here) is ERR_TP_NEGOTIATION saying to register one on both ends; the pipe goes on", async () => {
    const bare = await createContext({ transports: ["uv"], channels: [] });
    try {
      const listener = await server.listen("uv://127.0.0.1:0");
      const [here, there] = await Promise.all([bare.connect(listener.addresses()[0]!), listener.accept()]);
      await expect(here.write({ tensors: [{ buffer: new Uint8Array(4), targetDevice: CPU_DEVICE }] })).rejects.toMatchObject({
        code: ErrorCode.NEGOTIATION,
        message: expect.stringMatching(
          /no channel was negotiated from cpu:0 here to cpu:0 at the peer \(channels: none\): register a channel for it on both ends \(for CPU tensors, basic works everywhere\)/,
        ),
      });
      await here.write({ metadata: "payloads and metadata need none" });
      expect((await there.readMessage()).metadata).toBe("payloads and metadata need none");
      listener.close();
    } finally {
      await bare.close();
    }
  });

  it("a listener with no channel registered hears why its peers hang up: ERR_TP_NEGOTIATION saying to register one, on both ends", async () => {
    const bare = await createContext({ transports: ["uv"], channels: [] });
    try {
      const listener = await bare.listen("uv://127.0.0.1:0");
      const dropped: Error[] = [];
      listener.on("connectionError", (e) => dropped.push(e));
      await expect(client.connect(listener.url())).rejects.toMatchObject({
        code: ErrorCode.NEGOTIATION,
        message: expect.stringMatching(/no channel for CPU tensors in common with the listener/),
      });
      await expect.poll(() => dropped.length).toBe(1);
      expect(dropped[0]).toMatchObject({
        code: ErrorCode.NEGOTIATION,
        message: expect.stringMatching(
          /^the peer hung up on this listener's answer, which had no channel for CPU tensors in common with it \(it offered basic; here: none registered, or none viable\): register one both ends have/,
        ),
      });
    } finally {
      await bare.close();
    }
  });

  it.each(["uv", "shm"] as const)("a write after the peer closed the pipe over %s says so, not 'read: ...'", async (transport) => {
    const ctx = await createContext({ transports: [transport], channels: ["basic"] });
    try {
      const listener = await ctx.listen(transport === "uv" ? "uv://127.0.0.1:0" : "shm://*");
      const [gone, left] = await Promise.all([ctx.connect(listener.url()), listener.accept()]);
      gone.close();
      await left.closed;
      await expect(left.write({ metadata: "to nobody" })).rejects.toMatchObject({
        code: ErrorCode.PEER_CLOSED,
        message: expect.stringMatching(/^the peer closed the pipe \(/),
      });
    } finally {
      await ctx.close();
    }
  });

  it("a large write awaited before anyone reads times out saying the peer may not be reading", async () => {
    const ctx = await createContext({ transports: ["uv"], channels: ["basic"] });
    try {
      const listener = await ctx.listen("uv://127.0.0.1:0");
      const [a] = await Promise.all([ctx.connect(listener.url()), listener.accept()]);
      // The test-style script: await the write, then read. 16 MiB does not fit the socket's buffers.
      await expect(a.write({ tensors: [{ buffer: new Uint8Array(16 << 20), targetDevice: CPU_DEVICE }] }, { timeout: 500 })).rejects.toMatchObject({
        code: ErrorCode.TIMEOUT,
        message: expect.stringMatching(
          /^pipe write \(a large tensor goes out only as the peer reads it: is the peer reading, and not itself waiting on this write\?\) timed out/,
        ),
      });
    } finally {
      await ctx.close();
    }
  });

  it("closing the context ends its connects under way at once with ERR_TP_CLOSED, not at the handshake's deadline", async () => {
    // A listener that accepts and says nothing: the handshake would wait its 10 s.
    const silent = createServer((s) => s.on("error", () => undefined));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const ctx = await createContext({ transports: ["uv"], channels: ["basic"] });
    try {
      const pending = ctx.connect(`uv://127.0.0.1:${(silent.address() as AddressInfo).port}`);
      pending.catch(() => undefined);
      await new Promise((r) => setTimeout(r, 100));
      const started = performance.now();
      await ctx.close();
      await expect(pending).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      expect(performance.now() - started).toBeLessThan(2000);
    } finally {
      silent.close();
    }
  });
});
