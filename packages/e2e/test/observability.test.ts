import { execFile } from "node:child_process";
import diagnostics_channel from "node:diagnostics_channel";
import { connect } from "node:net";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import {
  type Context,
  CPU_DEVICE,
  ErrorCode,
  type ListenerErrorMessage,
  type MessageSizesMessage,
  type Pipe,
  type PipeCloseMessage,
  type PipeOpenMessage,
} from "@tensorpipe/core";
import { createContext } from "@tensorpipe/bench";
import { afterEach, describe, expect, it } from "vitest";

const run = promisify(execFile);
const e2eRoot = fileURLToPath(new URL("..", import.meta.url));

// One pipe over uv and one over shm, each carrying one message, in a
// process of its own: NODE_DEBUG is read when a process starts.
const SCRIPT = `
import { createContext } from "@tensorpipe/bench";
import { CPU_DEVICE } from "@tensorpipe/core";
for (const [transport, url] of [["uv", "uv://127.0.0.1:0"], ["shm", "shm://*"]]) {
  const server = await createContext({ transports: [transport], channels: ["basic", "cma"] });
  const client = await createContext({ transports: [transport], channels: ["basic", "cma"] });
  const listener = await server.listen([url]);
  const [there, here] = await Promise.all([listener.accept(), client.connect(listener.addresses()[0])]);
  await here.write({ metadata: "m", tensors: [{ buffer: new Uint8Array(16), targetDevice: CPU_DEVICE }] });
  await there.readMessage();
  await client.close();
  await server.close();
}
console.log("done");
`;

async function runWithDebug(nodeDebug: string | undefined): Promise<string> {
  const env = { ...process.env };
  delete env.NODE_DEBUG;
  if (nodeDebug !== undefined) env.NODE_DEBUG = nodeDebug;
  const { stdout, stderr } = await run(process.execPath, ["--input-type=module", "-e", SCRIPT], { cwd: e2eRoot, env });
  expect(stdout.trim()).toBe("done");
  return stderr;
}

describe("debug logs (NODE_DEBUG)", () => {
  it("say nothing unless asked", async () => {
    expect(await runWithDebug(undefined)).not.toMatch(/TENSORPIPE/);
  });

  it("tell, with NODE_DEBUG=tensorpipe:negotiation, what each side offered and why each backend was or was not chosen", async () => {
    const out = await runWithDebug("tensorpipe:negotiation");
    expect(out).toMatch(
      /TENSORPIPE:NEGOTIATION \d+: connect to uv:\/\/127\.0\.0\.1:\d+ over uv: offering transports uv "[^"]+"; channels cma \[cpu:0 "cma:[^"]+"\], basic \[cpu:0 "any"\]/,
    );
    expect(out).toMatch(/offers transports shm "shm:[^"]+"/);
    expect(out).toMatch(/: shm: chosen \(priority 10\)/);
    expect(out).toMatch(/: cma: cpu:0->cpu:0: chosen \(priority \d+\)/);
    expect(out).toMatch(/: basic: cpu:0->cpu:0: taken by cma, a channel of higher priority/);
    expect(out).toMatch(/answered, at 127\.0\.0\.1:\d+: connect side: transport uv; channels cpu:0->cpu:0 cma/);
    // The connecting side tells the listener's reasons as the listener's.
    expect(out).toMatch(/uv:\/\/127\.0\.0\.1:\d+: channel basic cpu:0->cpu:0 \(there\): lower priority: taken by cma/);
    // Only the section asked for.
    expect(out).not.toMatch(/TENSORPIPE:PIPE|TENSORPIPE:UV|TENSORPIPE \d+/);
  });

  it("tell everything with NODE_DEBUG=tensorpipe: pipes, connections of each transport", async () => {
    const out = await runWithDebug("tensorpipe");
    expect(out).toMatch(/TENSORPIPE \d+: negotiation: connect to uv:/);
    expect(out).toMatch(/TENSORPIPE \d+: pipe: pipe to uv:\/\/127\.0\.0\.1:\d+ open \(connect side\): transport uv, channels cpu:0->cpu:0: cma/);
    expect(out).toMatch(/TENSORPIPE \d+: pipe: pipe to .* closed: closed here/);
    expect(out).toMatch(/TENSORPIPE \d+: uv: connection 127\.0\.0\.1:\d+ <-> 127\.0\.0\.1:\d+ open/);
    expect(out).toMatch(/TENSORPIPE \d+: shm: connection .* open/);
    expect(out).toMatch(/TENSORPIPE \d+: uv: connection .* closed: /);
  });
});

describe("diagnostics_channel and stats", () => {
  const contexts: Context[] = [];
  const unsubscribe: (() => void)[] = [];
  afterEach(async () => {
    for (const u of unsubscribe.splice(0)) u();
    for (const c of contexts.splice(0)) await c.close();
  });

  function watch<T>(name: string): T[] {
    const seen: T[] = [];
    const onMessage = (m: unknown) => seen.push(m as T);
    diagnostics_channel.subscribe(name, onMessage);
    unsubscribe.push(() => diagnostics_channel.unsubscribe(name, onMessage));
    return seen;
  }

  async function pair(transport: "uv" | "shm"): Promise<{ server: Context; client: Context; here: Pipe; there: Pipe; address: string }> {
    const server = await createContext({ transports: [transport], channels: ["basic", "cma"] });
    const client = await createContext({ transports: [transport], channels: ["basic", "cma"] });
    contexts.push(server, client);
    const listener = await server.listen([transport === "uv" ? "uv://127.0.0.1:0" : "shm://*"]);
    const [there, here] = await Promise.all([listener.accept(), client.connect(listener.addresses()[0]!)]);
    return { server, client, here, there, address: listener.addresses()[0]! };
  }

  it("publish pipes opening and closing, and each message's sizes with the channel of each tensor", async () => {
    const opened = watch<PipeOpenMessage>("tensorpipe:pipe:open");
    const closed = watch<PipeCloseMessage>("tensorpipe:pipe:close");
    const writes = watch<MessageSizesMessage>("tensorpipe:message:write");
    const reads = watch<MessageSizesMessage>("tensorpipe:message:read");
    const { here, there } = await pair("uv");
    expect(opened.map((m) => [m.side, m.transport, m.channels.map((c) => c.channel)]).sort()).toEqual([
      ["connect", "uv", ["cma"]],
      ["listen", "uv", ["cma"]],
    ]);
    expect(opened.find((m) => m.side === "connect")!.pipe).toBe(here);
    // cma finishes a write once the peer has copied the tensor: both at once.
    await Promise.all([
      here.write({
        metadata: "hello",
        payloads: [{ data: new Uint8Array(3) }],
        tensors: [{ buffer: new Uint8Array(200_000), targetDevice: CPU_DEVICE }],
      }),
      there.readMessage(),
    ]);
    expect(writes).toEqual([{ pipe: here, metadataLength: 5, payloads: [3], tensors: [{ length: 200_000, channel: "cma" }] }]);
    expect(reads).toEqual([{ pipe: there, metadataLength: 5, payloads: [3], tensors: [{ length: 200_000, channel: "cma" }] }]);
    here.close();
    await there.closed;
    expect(closed.map((m) => [m.pipe === here ? "here" : "there", m.error.code])).toEqual([
      ["here", ErrorCode.CLOSED],
      ["there", ErrorCode.PEER_CLOSED],
    ]);
  });

  it("publish and count connections a listener drops, and it goes on", async () => {
    const dropped = watch<ListenerErrorMessage>("tensorpipe:listener:connectionError");
    const { server, client, address } = await pair("uv");
    const port = Number(address.split(":").at(-1));
    const junk = connect(port, "127.0.0.1", () => junk.end(Buffer.from("GET / HTTP/1.1\r\n\r\n")));
    await expect.poll(() => dropped.length).toBe(1);
    expect(dropped[0]!.error.code).toBe(ErrorCode.PROTOCOL);
    expect(dropped[0]!.remoteAddress).toMatch(/^127\.0\.0\.1:\d+$/);
    expect(server.stats().connectionErrors).toEqual({ [ErrorCode.PROTOCOL]: 1 });
    await client.connect(address);
    await expect.poll(() => server.stats().pipesOpened).toBe(2);
  });

  it.each(["uv", "shm"] as const)("count messages and bytes each way, by channel, and errors by code (%s)", async (transport) => {
    const { server, client, here, there } = await pair(transport);
    for (const size of [16, 5 * 1024 * 1024]) {
      const message = { payloads: [{ data: new Uint8Array(7) }], tensors: [{ buffer: new Uint8Array(size), targetDevice: CPU_DEVICE }] };
      await Promise.all([here.write(message), there.readMessage()]);
    }
    await there.write({ metadata: "back" });
    await here.readMessage();
    await expect(here.write({ tensors: [{ buffer: undefined as never }] })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    // Reads that waited and gave up count too; the pipe goes on.
    await expect(here.readMessage({ timeout: 20 })).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
    const giveUp = new AbortController();
    const waiting = here.readDescriptor({ signal: giveUp.signal });
    giveUp.abort();
    await expect(waiting).rejects.toMatchObject({ code: ErrorCode.ABORTED });
    const sent = 7 * 2 + 16 + 5 * 1024 * 1024;
    expect(here.stats()).toEqual({
      messagesSent: 2,
      messagesReceived: 1,
      bytesSent: sent,
      bytesReceived: 0,
      channels: { cma: { tensorsSent: 2, tensorsReceived: 0, bytesSent: 16 + 5 * 1024 * 1024, bytesReceived: 0 } },
      errors: { [ErrorCode.INVALID_ARG]: 1, [ErrorCode.TIMEOUT]: 1, [ErrorCode.ABORTED]: 1 },
    });
    expect(there.stats()).toMatchObject({ messagesSent: 1, messagesReceived: 2, bytesReceived: sent, errors: {} });
    // A snapshot: later traffic does not change it.
    const before = here.stats();
    await here.write({ metadata: "more" });
    await there.readMessage();
    expect(before.messagesSent).toBe(2);
    // A context sums its pipes, ended ones too.
    here.close();
    await there.closed;
    expect(client.stats()).toMatchObject({
      pipesOpened: 1,
      pipesOpen: 0,
      messagesSent: 3,
      bytesSent: sent,
      errors: { [ErrorCode.INVALID_ARG]: 1, [ErrorCode.TIMEOUT]: 1, [ErrorCode.ABORTED]: 1 },
    });
    expect(server.stats()).toMatchObject({
      pipesOpened: 1,
      pipesOpen: 0,
      messagesReceived: 3,
      bytesReceived: sent,
      channels: { cma: { tensorsReceived: 2, bytesReceived: 16 + 5 * 1024 * 1024 } },
      // The peer closing between messages is the end of the stream, not an error.
      errors: {},
    });
  });
});
