/**
 * docs/failure-semantics.md's table "the same event, the same code": each
 * event provoked over every transport, the code checked exactly.
 */
import { CPU_DEVICE, Context, ErrorCode, type Listener, type Pipe } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { ShmTransport } from "@tensorpipe/transport-shm";
import type { ChannelContext, Connection, Endpoint } from "@tensorpipe/core/backend";
import { BasicChannelContext } from "@tensorpipe/channel-basic";
import { CmaChannelContext } from "@tensorpipe/channel-cma";
import { spawn } from "node:child_process";
import { type AddressInfo, createServer } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";

const URLS = { uv: "uv://127.0.0.1:0", shm: "shm://" } as const;
const big = new Uint8Array(64 << 20).fill(3);

describe.each(["uv", "shm"] as const)("the same event, the same code, over %s", (transport) => {
  let contexts: Context[] = [];
  let listener: Listener;
  afterEach(async () => {
    await Promise.all(contexts.map((c) => c.close()));
    contexts = [];
  });

  /** Two ends of a pipe, in two contexts. */
  async function pipe(): Promise<{ here: Pipe; peer: Pipe }> {
    const [a, b] = [
      await createContext({ transports: [transport], channels: ["basic"] }),
      await createContext({ transports: [transport], channels: ["basic"] }),
    ];
    contexts.push(a, b);
    listener = await a.listen(URLS[transport]);
    const [here, peer] = await Promise.all([b.connect(listener.addresses()[0]!), listener.accept()]);
    return { here, peer };
  }

  it("the peer closes between messages: ERR_TP_PEER_CLOSED for the pending read and the writes after", async () => {
    const { here, peer } = await pipe();
    const read = here.readDescriptor();
    peer.close();
    await expect(read).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
    await expect(here.write({ metadata: "late" })).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
  });

  /**
   * A pipe to another process over `channel`, that runs `then` (with its
   * pipe as `p`) once connected, says so, and waits to be killed.
   */
  async function peerProcess(channel: string, then = "") {
    const a = await createContext({ transports: [transport], channels: [channel] });
    contexts.push(a);
    listener = await a.listen(URLS[transport]);
    const script = `
      const { createContext } = await import(${JSON.stringify(new URL("../../../bench/dist/index.js", import.meta.url).href)});
      const c = await createContext({ transports: [${JSON.stringify(transport)}], channels: [${JSON.stringify(channel)}] });
      const p = await c.connect(${JSON.stringify(listener.addresses()[0])});
      ${then}
      console.log("up");
      setInterval(() => {}, 1000);`;
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["ignore", "pipe", "inherit"] });
    const exited = new Promise((r) => child.once("exit", r));
    const here = await listener.accept();
    await new Promise((r) => child.stdout!.once("data", r));
    const kill = async () => {
      child.kill("SIGKILL");
      await exited;
    };
    return { here, kill };
  }

  // Its connections end at once, main's behind what it still carries: the
  // others' ends must not cut the messages short for a reader that is slow.
  it("the peer writes messages and closes: a reader that takes its time still gets every one, then the end", async () => {
    const { here, peer } = await pipe();
    const n = 20;
    await Promise.all(
      Array.from({ length: n }, (_, i) =>
        peer.write({ metadata: String(i), payloads: [{ data: new Uint8Array(1024).fill(i) }], tensors: [{ buffer: new Uint8Array(1024).fill(i) }] }),
      ),
    );
    peer.close();
    const got: string[] = [];
    for await (const m of here) {
      expect(m.payloads[0]!.data[0]).toBe(got.length);
      expect(m.tensors[0]!.buffer[1023]).toBe(got.length);
      got.push(m.metadata);
      // Longer than the pipe takes to judge a connection cut alone.
      if (got.length === 1) await new Promise((r) => setTimeout(r, 2500));
    }
    expect(got).toEqual(Array.from({ length: n }, (_, i) => String(i)));
    await expect(here.closed).resolves.toMatchObject({ code: ErrorCode.PEER_CLOSED });
  });

  // Over TCP a process that dies with bytes of ours unread ends in a reset
  // where it would have been EOF; over shm there is no such difference.
  it.each([
    ["tensor", "basic"],
    ["tensor", "cma"],
    ["tensor", "mpt"],
    ["payload", "basic"],
  ] as const)(
    "the peer's process dies with a %s over %s of this side's unread: one ERR_TP_PEER_CLOSED for the pending write and read",
    async (part, channel) => {
      // A peer that reads nothing.
      const { here, kill } = await peerProcess(channel);
      const written = here.write(part === "tensor" ? { tensors: [{ buffer: big }] } : { payloads: [{ data: big }] }).catch((e: unknown) => e);
      const read = here.readDescriptor().catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 100));
      await kill();
      const error = await written;
      expect(error).toMatchObject({
        code: ErrorCode.PEER_CLOSED,
        message: expect.stringMatching(/^peer closed the pipe with 1 write\(s\) of this side unfinished/),
      });
      // The errno name says how the kernel told it: over basic, the reset of a peer that left bytes of ours unread.
      if (transport === "uv" && channel === "basic") expect(error).toMatchObject({ errnoName: "ECONNRESET" });
      expect(await read).toBe(error);
      expect(await here.closed).toBe(error);
    },
  );

  it("the peer's process dies while writing a message: ERR_TP_CONNECTION_RESET, truncated, for the reader", async () => {
    const { here, kill } = await peerProcess("basic", `p.write({ tensors: [{ buffer: new Uint8Array(${64 << 20}) }] }).catch(() => {});`);
    const d = await here.readDescriptor();
    // Nothing read yet: the peer is stuck with most of the tensor when it dies.
    await kill();
    const read = here.read({ payloads: [], tensors: [{ buffer: new Uint8Array(d.tensors[0]!.length) }] });
    await expect(read).rejects.toMatchObject({ code: ErrorCode.CONNECTION_RESET, message: expect.stringMatching(/^truncated (frame|message): /) });
  });

  it("the peer closes in the middle of a message: ERR_TP_CONNECTION_RESET (truncated frame) for the reader", async () => {
    const { here, peer } = await pipe();
    const written = peer.write({ tensors: [{ buffer: big }] }).catch((e: unknown) => e);
    const d = await here.readDescriptor();
    const read = here.read({ payloads: [], tensors: [{ buffer: new Uint8Array(d.tensors[0]!.length) }] });
    await new Promise((r) => setTimeout(r, 2));
    peer.close();
    await expect(read).rejects.toMatchObject({ code: ErrorCode.CONNECTION_RESET, message: expect.stringMatching(/truncated frame/) });
    expect(await written).toMatchObject({ code: ErrorCode.CLOSED });
  });

  // A peer closing its pipe closes every connection; one that closes a
  // channel's alone leaves main open, and nothing uses the channel's until
  // the next tensor: the pipe must not wait for that to learn it.
  it.each(["basic", "cma"] as const)(
    "the peer cuts the pipe's %s connection alone and keeps the pipe: ERR_TP_CONNECTION_RESET, idle or not",
    async (channel) => {
      const given: { endpoint: Endpoint; connections: readonly Connection[] }[] = [];
      const context = async () => {
        const c = await createContext({ transports: [transport], channels: [] });
        contexts.push(c);
        const inner: ChannelContext = channel === "basic" ? new BasicChannelContext() : new CmaChannelContext();
        // The channel as it is, but for the connections it is given, kept to be cut.
        const recording = new Proxy(inner, {
          get(target, key) {
            if (key === "createChannel") {
              return (connections: readonly Connection[], endpoint: Endpoint, info?: unknown) => {
                given.push({ endpoint, connections });
                return target.createChannel(connections, endpoint, info as never);
              };
            }
            const v = Reflect.get(target, key) as unknown;
            return typeof v === "function" ? v.bind(target) : v;
          },
        });
        c.registerChannel(100, channel, recording);
        return c;
      };
      const [a, b] = [await context(), await context()];
      listener = await a.listen(URLS[transport]);
      const [here, peer] = await Promise.all([b.connect(listener.addresses()[0]!), listener.accept()]);
      expect(here.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe(channel);
      // A tensor first, so that the channel's connections have been used (over uv cma reads it by address: the write settles once read).
      const written = peer.write({ tensors: [{ buffer: new Uint8Array(1 << 20).fill(7) }] });
      expect((await here.readMessage()).tensors[0]!.buffer[0]).toBe(7);
      await written;
      const read = here.readDescriptor().catch((e: unknown) => e);
      const t0 = performance.now();
      given.find((g) => g.endpoint === "listen")!.connections[0]!.close();
      const error = await here.closed;
      expect(error).toMatchObject({
        code: ErrorCode.CONNECTION_RESET,
        message: expect.stringMatching(new RegExp(`^the peer closed the pipe's ${channel} channel connection while the pipe stayed open`)),
      });
      expect(performance.now() - t0).toBeLessThan(5000);
      expect(await read).toBe(error);
      // The peer's pipe learns of it as the end of the stream.
      await expect(peer.closed).resolves.toMatchObject({ code: ErrorCode.PEER_CLOSED });
    },
  );

  it("this side closes: ERR_TP_CLOSED for what was pending and what comes after", async () => {
    const { here } = await pipe();
    const read = here.readDescriptor();
    here.close();
    await expect(read).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    await expect(here.write({})).rejects.toMatchObject({ code: ErrorCode.CLOSED });
  });

  it("a read's timeout expires: ERR_TP_TIMEOUT; an abort: ERR_TP_ABORTED", async () => {
    const { here } = await pipe();
    await expect(here.readDescriptor({ timeout: 20 })).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
    await expect(here.readDescriptor({ signal: AbortSignal.abort() })).rejects.toMatchObject({ code: ErrorCode.ABORTED });
  });

  // Over shm the drop comes in the transport's own handshake; that case is
  // in transport-shm's tests (its C fixture listens at an exact abstract name).
  it.runIf(transport === "uv")("the listener drops the connection before the handshake is done: ERR_TP_NEGOTIATION, saying what may cause it", async () => {
    // Accepts and closes at once, as a listener out of descriptors does.
    const dropper = createServer((s) => s.destroy());
    await new Promise<void>((r) => dropper.listen(0, "127.0.0.1", r));
    try {
      const ctx = await createContext({ transports: [transport], channels: ["basic"] });
      contexts.push(ctx);
      await expect(ctx.connect(`uv://127.0.0.1:${(dropper.address() as AddressInfo).port}`)).rejects.toMatchObject({
        code: ErrorCode.NEGOTIATION,
        message: expect.stringMatching(/peer closed the connection during the handshake: .*out of file descriptors/),
      });
    } finally {
      dropper.close();
    }
  });

  it.runIf(transport === "shm")(
    "the listener drops a connection its answer asked for, in shm's own handshake: ERR_TP_NEGOTIATION, as for the first",
    async () => {
      const server = await createContext({ transports: ["shm"], channels: ["basic"] });
      const client = new Context();
      contexts.push(server, client);
      // As a listener out of descriptors resets the second connection in shm's handshake.
      const shm = new ShmTransport();
      const connect = shm.connect.bind(shm);
      let calls = 0;
      shm.connect = (address, options) =>
        ++calls === 2
          ? Promise.reject(Object.assign(new Error("shm handshake: connection reset by peer"), { code: "ECONNRESET", syscall: "shm handshake" }))
          : connect(address, options);
      client.registerTransport(200, "shm", shm);
      registerBasicChannel(client);
      const l = await server.listen(URLS.shm);
      await expect(client.connect(l.addresses()[0]!)).rejects.toMatchObject({
        code: ErrorCode.NEGOTIATION,
        message: expect.stringMatching(
          /peer closed a connection its answer asked for during the handshake: it could not take the connection \(out of file descriptors/,
        ),
      });
    },
  );

  it("nobody listens at the address: ERR_TP_CONNECTION_REFUSED", async () => {
    await pipe();
    const address = listener.addresses()[0]!;
    await listener.close();
    await expect(contexts[1]!.connect(address)).rejects.toMatchObject({ code: ErrorCode.CONNECTION_REFUSED });
  });
});
