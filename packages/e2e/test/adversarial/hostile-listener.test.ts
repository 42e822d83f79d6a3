/**
 * A listener that lies in its BrochureAnswer, against a tensorpipe-js
 * dialler: whatever it names (transport, channel, device, domain,
 * address) or says in a refusal's report, the dialler fails with a typed
 * error whose text is short and holds nothing of the peer's that could
 * forge a line or hide text; an address that is not one is the
 * listener's fault (ERR_TP_PROTOCOL), not the caller's.
 */
import { spawn } from "node:child_process";
import { type AddressInfo, type Server, type Socket, createServer } from "node:net";
import { fileURLToPath } from "node:url";
import { Context, ErrorCode, type TensorPipeError } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { UvTransport, registerUvTransport } from "@tensorpipe/transport-uv";
import { ShmTransport, registerShmTransport } from "@tensorpipe/transport-shm";
import { onTheWire, protocol } from "@tensorpipe/core/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { Victim } from "./peers.js";

type Answer = Parameters<typeof protocol.encodeBrochureAnswer>[0];

/** A listener that reads a dialler's packet and brochure and writes `answer` back, whatever was offered. */
async function lyingListener(answer: (port: number) => Answer): Promise<{ server: Server; url: string }> {
  const server = createServer((socket: Socket) => {
    let got = Buffer.alloc(0);
    let sent = false;
    socket.on("error", () => undefined);
    socket.on("data", (d: Buffer) => {
      got = Buffer.concat([got, d]);
      // Two frames: the packet and the brochure.
      let at = 0;
      for (let frame = 0; frame < 2; frame++) {
        if (got.length < at + 8) return;
        at += 8 + Number(got.readBigUInt64LE(at));
      }
      if (got.length < at || sent) return;
      sent = true;
      socket.write(onTheWire([protocol.encodeBrochureAnswer(answer((server.address() as AddressInfo).port))]));
    });
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  return { server, url: `uv://127.0.0.1:${(server.address() as AddressInfo).port}` };
}

/** A server on another host (127.0.0.2, another address of this one) that counts the connections it gets. */
async function thirdParty(): Promise<{ server: Server; port: number; connections: () => number }> {
  let connections = 0;
  const server = createServer((socket) => {
    connections++;
    socket.on("error", () => undefined);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.2", r));
  return { server, port: (server.address() as AddressInfo).port, connections: () => connections };
}

const honest = (port: number): Answer => ({
  transport: "uv",
  address: `127.0.0.1:${port}`,
  transportRegistrationIds: new Map([[1, 1n]]),
  transportDomainDescriptor: "uv:*",
  channelRegistrationIds: new Map([["basic", [2n]]]),
  channelDeviceDescriptors: new Map([["basic", new Map([["cpu:0", { device: { type: "cpu", index: 0 }, descriptor: "any" }]])]]),
  channelForDevicePair: [{ local: { type: "cpu", index: 0 }, remote: { type: "cpu", index: 0 }, channel: "basic" }],
});

// ESC, a right-to-left override, a line separator, NUL: what could forge a line or hide text.
const forged = "\u001b[2J\u202e\u2028\u0000";
const huge = `${forged}x`.repeat(50_000);

/** A refusal whose report holds `verdicts` of the listener's, each with a reason of its own. */
function refusal(verdicts: number): Answer {
  const report = {
    offered: { transports: ["uv"], channels: ["basic"] },
    refused: "channel",
    verdicts: Array.from({ length: verdicts }, (_, i) => ({
      kind: "channel",
      name: `c${i}${forged}`,
      by: "here",
      outcome: "not viable",
      reason: `${i}${forged}${"r".repeat(1000)}`,
    })),
  };
  return {
    transport: "",
    address: "",
    transportRegistrationIds: new Map(),
    transportDomainDescriptor: "",
    channelRegistrationIds: new Map(),
    channelDeviceDescriptors: new Map([
      ["tensorpipe-js.path-report", new Map([["report:0", { device: { type: "report", index: 0 }, descriptor: JSON.stringify(report) }]])],
    ]),
    channelForDevicePair: [],
  };
}

describe("tensorpipe doctor --peer against a listener that lies in its report", () => {
  it("quotes the peer's words as the peer's, escaped and bounded, prints its own verdict last, and is never cut when piped", async () => {
    const report = {
      offered: { transports: ["uv"], channels: ["basic"] },
      verdicts: Array.from({ length: 200 }, (_, i) => ({
        kind: "channel",
        name: `c${i}`,
        by: "here",
        outcome: "not viable",
        reason: `${forged}\ntensorpipe doctor: all checks passed\n" forged "advice`,
      })),
    };
    const answer = (p: number): Answer => {
      const a = honest(p);
      a.channelDeviceDescriptors.set(
        "tensorpipe-js.path-report",
        new Map([["report:0", { device: { type: "report", index: 0 }, descriptor: JSON.stringify(report) }]]),
      );
      return a;
    };
    const { server, url } = await lyingListener(answer);
    try {
      const cli = fileURLToPath(new URL("../../../cli/dist/main.js", import.meta.url));
      const { stdout, code } = await new Promise<{ stdout: string; code: number | null }>((resolve) => {
        const child = spawn(process.execPath, [cli, "doctor", "--peer", url], { stdio: ["ignore", "pipe", "inherit"] });
        let out = "";
        child.stdout.on("data", (d: Buffer) => (out += d.toString()));
        child.on("close", (c) => resolve({ stdout: out, code: c }));
      });
      const lines = stdout.trimEnd().split("\n");
      // Whole: its own verdict on the pipe is its last line.
      expect(lines.at(-1)).toBe(`pipe to ${url}: opened over uv`);
      expect(code).toBe(0);
      expect(stdout).not.toMatch(/[\u0000-\u0009\u000b-\u001f\u202e\u2028]/);
      // Only doctor's own first line starts so; the peer's words are quoted as the peer's.
      expect(lines.filter((l) => l.startsWith("tensorpipe doctor"))).toHaveLength(1);
      const quoted = lines.filter((l) => /^ {2}channel c\d+:/.test(l));
      expect(quoted.length).toBeGreaterThan(0);
      expect(quoted.length).toBeLessThanOrEqual(64);
      for (const l of quoted)
        expect(l).toMatch(
          /^ {2}channel c\d+: not viable, the peer says: "\\x1b\[2J\\u202e\\u2028\\x00\\x0atensorpipe doctor: all checks passed\\x0a\\" forged \\"advice"$/,
        );
    } finally {
      server.close();
    }
  });
});

describe("a listener that lies in its answer", () => {
  let client: Context;
  const servers: Server[] = [];
  beforeAll(async () => {
    client = await createContext({ transports: ["uv"], channels: ["basic"] });
  });
  afterAll(async () => {
    for (const s of servers) s.close();
    await client.close();
  });

  async function dialled(answer: (port: number) => Answer, path?: { channels: string[] }): Promise<TensorPipeError> {
    const { server, url } = await lyingListener(answer);
    servers.push(server);
    return (await client.connect(url, path && { path }).then(
      () => expect.unreachable("a pipe opened"),
      (e: unknown) => e,
    )) as TensorPipeError;
  }

  it.each([
    [
      "a transport this side lacks",
      (p: number): Answer => ({ ...honest(p), transport: huge }),
      /^peer chose transport "[^"]*\.\.\. \(400000 characters\)", which this side lacks/,
    ],
    [
      "another domain",
      (p: number): Answer => ({ ...honest(p), transportDomainDescriptor: huge }),
      /domains differ: "uv:\*" here, "[^"]*\.\.\. \(400000 characters\)" there/,
    ],
    [
      "a channel this side lacks",
      (p: number): Answer => ({ ...honest(p), channelForDevicePair: [{ local: { type: "cpu", index: 0 }, remote: { type: "cpu", index: 0 }, channel: huge }] }),
      /^peer chose channel "[^"]*\.\.\. \(400000 characters\)", which this side lacks/,
    ],
  ])("%s: ERR_TP_NEGOTIATION, its text cut short and made safe", async (_, answer, text) => {
    const err = await dialled(answer);
    expect(err).toMatchObject({ code: ErrorCode.NEGOTIATION, message: expect.stringMatching(text) });
    expect(err.message.length).toBeLessThan(400);
    expect(err.message).not.toMatch(/[\u0000-\u001f\u202e\u2028]/);
  });

  it("a device type that is no name: ERR_TP_PROTOCOL as the answer is decoded, its text cut short and made safe", async () => {
    const err = await dialled((p) => ({
      ...honest(p),
      channelForDevicePair: [{ local: { type: huge, index: 0 }, remote: { type: "cpu", index: 0 }, channel: "basic" }],
    }));
    expect(err).toMatchObject({
      code: ErrorCode.PROTOCOL,
      message: expect.stringMatching(/device type "\\x1b\[2J.*\.\.\. \(400000 characters\)" is not a name/),
    });
    expect(err.message.length).toBeLessThan(400);
    expect(err.message).not.toMatch(/[\u0000-\u001f\u202e\u2028]/);
  });

  it.each([
    ["not one", () => huge, /^the listener answered with "[^"]*\.\.\. \(400000 characters\)", which is not an address to dial/],
    [
      "too long, of a name's characters",
      (p: number) => `${`${"a".repeat(60)}.`.repeat(3000)}:${p}`,
      /\(1830\d\d characters\)", which is not an address to dial/,
    ],
    [
      "this side's own, with a forged scope",
      (p: number) => `127.0.0.1%${forged}:${p}`,
      /^the listener answered with "127\.0\.0\.1%\\x1b\[2J\\u202e\\u2028\\x00:\d+", which is not an address to dial/,
    ],
  ])("an address that is %s: ERR_TP_PROTOCOL, the listener's fault; nothing of it unbounded or unsafe in the error or its record", async (_, address, text) => {
    const err = await dialled((p) => ({ ...honest(p), address: address(p) }));
    expect(err).toMatchObject({ code: ErrorCode.PROTOCOL, message: expect.stringMatching(text) });
    expect(err.message.length).toBeLessThan(400);
    const record = JSON.stringify(err.flightRecord);
    expect(record.length).toBeLessThan(4000);
    expect(`${err.message}${record}`).not.toMatch(/[\u0000-\u001f\u202e\u2028]/);
  });

  it.each([
    ["another host's address", (third: number) => `127.0.0.2:${third}`],
    ["something that is no address", () => "nowhere"],
    ["the unspecified address", (_: number, own: number) => `0.0.0.0:${own}`],
  ])("an answer naming %s on the transport dialled: the pipe's connections go where the listener was reached, none elsewhere", async (_, address) => {
    const third = await thirdParty();
    servers.push(third.server);
    let own = 0;
    const lying = await lyingListener((p) => ({ ...honest(p), address: address(third.port, p) }));
    servers.push(lying.server);
    lying.server.on("connection", () => own++);
    const pipe = await client.connect(lying.url);
    // Main, reply and basic's: all at the listener, none at the third party.
    await expect.poll(() => own).toBe(3);
    expect(third.connections()).toBe(0);
    await pipe.close();
  });

  it("an answer switching to another network transport at another host: ERR_TP_PROTOCOL, and no connection goes there", async () => {
    const third = await thirdParty();
    servers.push(third.server);
    const ctx = new Context();
    registerUvTransport(ctx);
    ctx.registerTransport(50, "uv2", new UvTransport());
    registerBasicChannel(ctx);
    try {
      for (const [address, allowed] of [
        [`127.0.0.2:${third.port}`, false],
        ["127.0.0.1:1", true],
      ] as const) {
        const lying = await lyingListener((p) => ({
          ...honest(p),
          transport: "uv2",
          transportRegistrationIds: new Map([
            [0, 0n],
            [1, 1n],
          ]),
          address,
        }));
        servers.push(lying.server);
        const err = (await ctx.connect(lying.url).then(
          () => expect.unreachable("a pipe opened"),
          (e: unknown) => e,
        )) as TensorPipeError;
        if (allowed) {
          // This host: dialled, and refused there.
          expect(err.code).toBe(ErrorCode.CONNECTION_REFUSED);
        } else {
          expect(err).toMatchObject({
            code: ErrorCode.PROTOCOL,
            message: expect.stringMatching(
              /^the listener named "127\.0\.0\.2:\d+" for the pipe's uv2 connections, which is not the host this side reached it at \(127\.0\.0\.1:\d+\): a listener may name only itself/,
            ),
          });
        }
      }
      expect(third.connections()).toBe(0);
    } finally {
      await ctx.close();
    }
  });

  it("an answer switching a dialler that reached it from another host to shm: ERR_TP_PROTOCOL (it would point the connections at any process here); from this host it is taken", async () => {
    const shmDomain = new ShmTransport().domainDescriptor();
    for (const [seenAt, allowed] of [
      ["192.0.2.1", false],
      ["127.0.0.1", true],
    ] as const) {
      const ctx = new Context();
      // The listener's connection as it would be from another host.
      const uv = new UvTransport();
      const connect = uv.connect.bind(uv);
      uv.connect = async (address, options) => {
        const c = await connect(address, options);
        Object.defineProperty(c, "remoteAddress", { value: `${seenAt}:4000` });
        return c;
      };
      ctx.registerTransport(100, "uv", uv);
      registerShmTransport(ctx);
      registerBasicChannel(ctx);
      try {
        const lying = await lyingListener((p) => ({
          ...honest(p),
          transport: "shm",
          transportDomainDescriptor: shmDomain,
          transportRegistrationIds: new Map([
            [0, 0n],
            [1, 1n],
          ]),
          address: `tp-nobody-${process.pid}`,
        }));
        servers.push(lying.server);
        const err = (await ctx.connect(lying.url).then(
          () => expect.unreachable("a pipe opened"),
          (e: unknown) => e,
        )) as TensorPipeError;
        if (allowed) expect(err.code).toBe(ErrorCode.CONNECTION_REFUSED);
        else
          expect(err).toMatchObject({
            code: ErrorCode.PROTOCOL,
            message: expect.stringMatching(/^the listener, reached at 192\.0\.2\.1:4000, switched the pipe to shm, which reaches this machine alone/),
          });
      } finally {
        await ctx.close();
      }
    }
  });

  it("an answer switching to shm at another process's listener: ERR_TP_PROTOCOL after one connection there, none of the pipe's", async () => {
    const victim = await Victim.start();
    try {
      const shmDomain = new ShmTransport().domainDescriptor();
      const ctx = await createContext({ transports: ["uv", "shm"], channels: ["basic", "mpt"] });
      try {
        // mpt asks for 64 lanes: a dialler that followed had opened 67 connections to the victim.
        const lanes = Array.from({ length: 65 }, (_, i) => BigInt(10 + i));
        const lying = await lyingListener((p) => ({
          ...honest(p),
          transport: "shm",
          transportDomainDescriptor: shmDomain,
          transportRegistrationIds: new Map([
            [0, 0n],
            [1, 1n],
          ]),
          address: victim.shmUrl.slice("shm://".length),
          channelRegistrationIds: new Map([
            ["basic", [2n]],
            ["mpt", lanes],
          ]),
        }));
        servers.push(lying.server);
        const err = (await ctx.connect(lying.url).then(
          () => expect.unreachable("a pipe opened"),
          (e: unknown) => e,
        )) as TensorPipeError;
        expect(err).toMatchObject({
          code: ErrorCode.PROTOCOL,
          message: expect.stringMatching(new RegExp(`switched the pipe to shm at "[^"]+", where process ${victim.pid} listens, not the one this side dialled`)),
        });
        // The one connection that proved it went nowhere: it sent no packet, and the victim dropped it.
        await victim.next((e) => e.event === "connection-error");
        await new Promise((r) => setTimeout(r, 500));
        expect(victim.events.filter((e) => e.event === "connection-error").length).toBe(1);
      } finally {
        await ctx.close();
      }
    } finally {
      await victim.stop();
    }
  });

  it("a refusal with long names sharing a few reasons: the first few names, cut, in a short error", async () => {
    const answer = refusal(0);
    const report = {
      offered: { transports: [], channels: [] },
      refused: "transport",
      verdicts: Array.from({ length: 100 }, (_, i) => ({
        kind: "transport",
        name: `${i}${"n".repeat(200)}`,
        by: "here",
        outcome: "not viable",
        reason: `reason ${i % 8}`,
      })),
    };
    answer.channelDeviceDescriptors.get("tensorpipe-js.path-report")!.get("report:0")!.descriptor = JSON.stringify(report);
    const err = await dialled(() => answer, { channels: ["basic"] });
    // The report keeps what fits in 8192 characters; the error, six names a reason.
    expect(err).toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringMatching(
        /^the listener refused the pipe: no transport in common \(there: 0n+\.\.\. \(201 characters\), 8n+\.\.\. \(201 characters\), .*, \d+ more: reason 0; /,
      ),
    });
    expect(err.message.length).toBeLessThan(6 * 1024);
  });

  it("a refusal with many long reasons: the first few, made safe, in a short error", async () => {
    const err = await dialled(() => refusal(25), { channels: ["basic"] });
    expect(err).toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringMatching(
        /^the listener refused the pipe: no channel for CPU tensors \(there: c0\\x1b\[2J\\u202e\\u2028\\x00: 0\\x1b\[2J\\u202e\\u2028\\x00r+\.\.\. \(\d+ characters\); c1.*; \d+ more\)/,
      ),
    });
    // 6 reasons of at most 640 characters, where 25 were sent.
    expect(err.message.length).toBeLessThan(6 * 1024);
    expect(err.message).not.toMatch(/[\u0000-\u001f\u202e\u2028]/);
  });
});
