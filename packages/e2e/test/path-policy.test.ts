/**
 * ConnectOptions.path and ListenerOptions.path: a pipe uses only the
 * backends its path allows, on every pair of transport and channel, set on
 * either end; one that cannot fails with ERR_TP_NEGOTIATION saying why,
 * instead of falling back.
 */
import { CPU_DEVICE, type Context, ErrorCode, type Listener, type PathPolicy, type TensorPipeError } from "@tensorpipe/core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { registerUnrunnable } from "./contexts.js";

const pairs = ["uv", "shm"].flatMap((transport) => ["basic", "cma", "mpt"].map((channel) => ({ transport, channel })));

describe("the path a pipe may take", () => {
  let server: Context;
  let client: Context;
  let open: Listener;
  const closers: (() => unknown)[] = [];

  beforeAll(async () => {
    server = await createContext();
    client = await createContext();
    open = await server.listen(["uv://127.0.0.1:0", "shm://"]);
  });
  afterAll(async () => {
    for (const c of closers) await c();
    await client.close();
    await server.close();
  });

  /** A listener of `context` (on uv and shm unless told), and its dropped connections' errors. */
  async function listener(context: Context, options?: Parameters<Context["listen"]>[1], urls = ["uv://127.0.0.1:0", "shm://"]) {
    const l = await context.listen(urls, options);
    const errors: TensorPipeError[] = [];
    l.on("connectionError", (e) => errors.push(e));
    closers.push(() => l.close());
    return { l, errors, uv: l.addresses().find((a) => a.startsWith("uv://"))! };
  }

  it("by default takes the best both have: shm and cma", async () => {
    const pipe = await client.connect(open.addresses()[0]!);
    expect([pipe.transport, pipe.channelFor(CPU_DEVICE, CPU_DEVICE)]).toEqual(["shm", "cma"]);
    pipe.close();
  });

  /** A pipe from `client` to a listener of `server`, each end with its options; both ends, once both are up. */
  async function pipeBetween(connectPath?: PathPolicy, listenPath?: PathPolicy) {
    const { l, uv } = await listener(server, listenPath && { path: listenPath });
    const [here, there] = await Promise.all([client.connect(uv, connectPath && { path: connectPath }), l.accept()]);
    closers.push(() => here.close());
    return { here, there };
  }

  it.each(pairs)("asked for $transport + $channel by the dialling end, takes them", async ({ transport, channel }) => {
    const { here, there } = await pipeBetween({ transports: [transport], channels: [channel] });
    expect([here.transport, here.channelFor(CPU_DEVICE, CPU_DEVICE)]).toEqual([transport, channel]);
    expect([there.transport, there.channelFor(CPU_DEVICE, CPU_DEVICE)]).toEqual([transport, channel]);
    // A tensor read by address frees the writer once it is read: both at once.
    const [, got] = await Promise.all([here.write({ tensors: [{ buffer: new Uint8Array(300_000).fill(7) }] }), there.readMessage()]);
    expect(got.tensors[0]!.buffer.every((b) => b === 7)).toBe(true);
  });

  it.each(pairs)("asked for $transport + $channel by the listening end, takes them", async ({ transport, channel }) => {
    const { here, there } = await pipeBetween(undefined, { transports: [transport], channels: [channel] });
    expect([here.transport, here.channelFor(CPU_DEVICE, CPU_DEVICE)]).toEqual([transport, channel]);
    const [, got] = await Promise.all([there.write({ tensors: [{ buffer: new Uint8Array(300_000).fill(9) }] }), here.readMessage()]);
    expect(got.tensors[0]!.buffer.every((b) => b === 9)).toBe(true);
  });

  it("forbidden backends are passed over for the next best", async () => {
    const { here } = await pipeBetween({ forbid: ["shm", "cma"] });
    expect(here.transport).toBe("uv");
    expect(["basic", "mpt"]).toContain(here.channelFor(CPU_DEVICE, CPU_DEVICE));
  });

  it("a dialling end whose path the listener cannot meet fails with ERR_TP_NEGOTIATION saying so, and falls back to nothing", async () => {
    const basicOnly = await createContext({ transports: ["uv"], channels: ["basic"] });
    closers.push(() => basicOnly.close());
    const { uv, errors } = await listener(basicOnly, undefined, ["uv://127.0.0.1:0"]);
    await expect(client.connect(uv, { path: { channels: ["cma"] } })).rejects.toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringMatching(/the path \(channels cma\) is not met: the listener chose no channel for CPU tensors among cma "cma:[^"]+"/),
    });
    await expect(client.connect(uv, { path: { transports: ["shm"] } })).rejects.toMatchObject({ code: ErrorCode.NEGOTIATION });
    // The listener saw the first dialler go once it had read the answer, and the second offer nothing it has.
    await expect
      .poll(() => errors.find((e) => e.code === ErrorCode.NEGOTIATION))
      .toMatchObject({
        message: expect.stringMatching(/no transport in common \(peer has: shm; here: uv: the peer does not offer it\)/),
      });
  });

  it("a listener whose path a peer cannot meet drops it with ERR_TP_NEGOTIATION saying why", async () => {
    const { uv, errors } = await listener(server, { path: { channels: ["cma"] } });
    const basicOnly = await createContext({ transports: ["uv"], channels: ["basic"] });
    closers.push(() => basicOnly.close());
    await expect(basicOnly.connect(uv)).rejects.toMatchObject({ code: ErrorCode.NEGOTIATION });
    await expect.poll(() => errors.length).toBe(1);
    expect(errors[0]).toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringMatching(/no channel for CPU tensors \(here: cma: the peer does not offer it\).*this side's path: channels cma/),
    });
  });

  it("a tensorpipe-js dialler hears the listener's reasons for refusing it, told from its side", async () => {
    const { uv, errors } = await listener(server, { path: { channels: ["cma"] } }, ["uv://127.0.0.1:0"]);
    await expect(client.connect(uv, { path: { forbid: ["cma"] } })).rejects.toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringMatching(
        /^the listener refused the pipe: no channel for CPU tensors \(there: [^)]*\bbasic: not allowed by the peer's path \(channels cma\)\); this side's path: never cma \(uv:/,
      ),
    });
    await expect(client.connect(uv, { path: { transports: ["shm"] } })).rejects.toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringMatching(/^the listener refused the pipe: no transport in common \(there: shm: not listened on/),
    });
    await expect.poll(() => errors.length).toBe(2);
  });

  it("names that are not backends here, or not lists, are ERR_TP_INVALID_ARG saying what is registered", async () => {
    await expect(client.connect(open.addresses()[0]!, { path: { channels: ["cmaa"] } })).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(/path\.channels names "cmaa", which is not a registered channel \(registered: .*cma/),
    });
    await expect(client.connect(open.addresses()[0]!, { path: { transports: "shm" as unknown as string[] } })).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(/path\.transports must be an array of backend names/),
    });
    await expect(server.listen("uv://127.0.0.1:0", { path: { forbid: ["nope"] } })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
  });

  it("a listener whose path allows none of the transports it listens on is refused at listen(), saying how to fix it", async () => {
    await expect(server.listen("uv://127.0.0.1:0", { path: { transports: ["shm"] } })).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(
        /path \(transports shm\) allows none of the transports this listener listens on \(uv\): listen on a URL of an allowed transport \(shm\) too/,
      ),
    });
    await expect(server.listen("uv://127.0.0.1:0", { path: { forbid: ["uv"] } })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    const both = await server.listen(["uv://127.0.0.1:0", "shm://"], { path: { transports: ["shm"] } });
    closers.push(() => both.close());
  });

  it("a path that leaves nothing able to run here fails at once, with the reasons", async () => {
    registerUnrunnable(client, "unrunnable", "a test channel that cannot run", 1);
    await expect(client.connect(open.addresses()[0]!, { path: { channels: ["unrunnable"] } })).rejects.toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringMatching(/the path leaves no channel that can run here \(unrunnable: a test channel that cannot run\)/),
    });
  });
});
