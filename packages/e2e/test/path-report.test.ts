/**
 * pipe.path: both ends of a pipe say what each side offered, what was
 * chosen, and why every other transport and channel was not, each reason
 * from the end that had it.
 */
import { type Context, type PathReport, type PathVerdict, describePathReport } from "@tensorpipe/core";
import { onTheWire, protocol } from "@tensorpipe/core/testing";
import { RawSocket } from "./raw-socket.js";
import { describe, expect, it } from "vitest";
import { closedAfterEach, registerUnrunnable } from "./contexts.js";

const { context, closeLater } = closedAfterEach();

/** Both ends of one pipe between two fresh contexts. */
async function both(
  listenUrls: string[],
  connect: { options?: Parameters<Context["connect"]>[1]; setup?: (c: Context) => void } = {},
  listen: { setup?: (c: Context) => void } = {},
) {
  const server = await context();
  const client = await context();
  listen.setup?.(server);
  connect.setup?.(client);
  const l = await server.listen(listenUrls);
  closeLater(() => l.close());
  const [here, there] = await Promise.all([client.connect(l.addresses()[0]!, connect.options), l.accept()]);
  closeLater(() => here.close());
  return { here: here.path, there: there.path };
}

function verdict(report: PathReport, kind: PathVerdict["kind"], name: string, pair?: string): PathVerdict | undefined {
  return report.verdicts.find((v) => v.kind === kind && v.name === name && (pair === undefined || v.pair === pair));
}

describe("pipe.path", () => {
  it("on both ends: the same choice, each told by the side that made it", async () => {
    const { here, there } = await both(["uv://127.0.0.1:0", "shm://"]);
    for (const r of [here, there]) {
      expect(r.transport).toBe("shm");
      expect(r.peerReported).toBe(true);
      expect(r.pairs.map((p) => p.channel)).toEqual(["cma"]);
    }
    expect(there.side).toBe("listen");
    expect(verdict(there, "transport", "shm")).toMatchObject({ by: "here", outcome: "chosen" });
    expect(verdict(there, "transport", "uv")).toMatchObject({
      by: "here",
      outcome: "lower priority",
      reason: expect.stringMatching(/shm has a higher priority/),
    });
    expect(verdict(there, "channel", "basic", "cpu:0->cpu:0")).toMatchObject({ outcome: "lower priority", reason: expect.stringMatching(/taken by cma/) });
    // The dialling end learns the listener's reasons, as the listener's.
    expect(here.side).toBe("connect");
    expect(verdict(here, "transport", "shm")).toMatchObject({ by: "there", outcome: "chosen" });
    expect(verdict(here, "transport", "uv")).toMatchObject({ by: "there", outcome: "lower priority" });
    expect(verdict(here, "channel", "mpt", "cpu:0->cpu:0")).toMatchObject({ by: "there", outcome: "lower priority" });
    expect(here.offeredThere).toEqual(there.offeredHere);
    expect(there.offeredThere).toEqual(here.offeredHere);
    expect(describePathReport(here)).toMatch(/^connect side: transport shm; channels cpu:0->cpu:0 cma\n/);
  });

  it("a transport the listener does not listen on: the dialling end is told so", async () => {
    const { here } = await both(["uv://127.0.0.1:0"]);
    expect(here.transport).toBe("uv");
    expect(verdict(here, "transport", "shm")).toMatchObject({ by: "there", outcome: "not listened on" });
  });

  it("a channel that cannot run at the listener: the dialling end gets the listener's reason", async () => {
    const { here, there } = await both(
      ["uv://127.0.0.1:0"],
      { setup: (c) => c.registerChannel(5000, "fast", fastChannel()) },
      { setup: (c) => registerUnrunnable(c, "fast", "its device is gone") },
    );
    expect(verdict(there, "channel", "fast")).toMatchObject({ by: "here", outcome: "not viable", reason: "not viable here: its device is gone" });
    expect(verdict(here, "channel", "fast")).toMatchObject({ by: "there", outcome: "not viable", reason: "not viable there: its device is gone" });
  });

  it("a channel that cannot run at the dialling end: the listener gets its reason instead of 'not offered'", async () => {
    const { here, there } = await both(
      ["uv://127.0.0.1:0"],
      { setup: (c) => registerUnrunnable(c, "fast", "no such device here") },
      { setup: (c) => c.registerChannel(5000, "fast", fastChannel()) },
    );
    expect(verdict(here, "channel", "fast")).toMatchObject({ by: "here", outcome: "not viable", reason: "not viable here: no such device here" });
    expect(there.verdicts.filter((v) => v.name === "fast")).toEqual([
      { kind: "channel", name: "fast", by: "there", outcome: "not viable", reason: "not viable there: no such device here" },
    ]);
  });

  it("a backend the dialling end's path forbids: both ends say it was not allowed, and by whom", async () => {
    const { here, there } = await both(["uv://127.0.0.1:0", "shm://"], { options: { path: { forbid: ["mpt"] } } });
    expect(verdict(here, "channel", "mpt")).toMatchObject({ by: "here", outcome: "not allowed", reason: expect.stringMatching(/never mpt/) });
    expect(verdict(there, "channel", "mpt")).toMatchObject({ by: "there", outcome: "not allowed" });
    expect(here.offeredHere.channels).not.toContain("mpt");
  });

  it("a brochure of upstream's backends alone (uv + basic) trades reasons too: each end tells the other's part", async () => {
    const server = await context({ transports: ["uv"], channels: ["basic", "mpt"] });
    const client = await context({ transports: ["uv"], channels: ["basic"] });
    const l = await server.listen("uv://127.0.0.1:0");
    closeLater(() => l.close());
    const [a, b] = await Promise.all([client.connect(l.addresses()[0]!), l.accept()]);
    closeLater(() => a.close());
    expect(a.path).toMatchObject({ peerReported: true, offeredThere: { transports: ["uv"], channels: ["mpt", "basic"] } });
    expect(verdict(a.path, "channel", "basic")).toMatchObject({ by: "there", outcome: "chosen" });
    expect(b.path).toMatchObject({ peerReported: true, offeredThere: { transports: ["uv"], channels: ["basic"] } });
  });

  /** A listener over uv + basic whose "chunked" channel cuts 64 KiB chunks, and a client whose cuts 1024 KiB. */
  async function chunkedEnds() {
    const server = await context({ transports: ["uv"], channels: ["basic"] });
    const client = await context({ transports: ["uv"], channels: ["basic"] });
    server.registerChannel(5000, "chunked", chunkedChannel(64));
    client.registerChannel(5000, "chunked", chunkedChannel(1024));
    const l = await server.listen("uv://127.0.0.1:0");
    closeLater(() => l.close());
    return { client, l };
  }

  it("a third party's channel whose ends differ, with no wire extension offered: the dialling end gets the listener's reason", async () => {
    const { client, l } = await chunkedEnds();
    const [a] = await Promise.all([client.connect(l.addresses()[0]!), l.accept()]);
    closeLater(() => a.close());
    expect(a.path.pairs.map((p) => p.channel)).toEqual(["basic"]);
    expect(verdict(a.path, "channel", "chunked")).toMatchObject({
      by: "there",
      outcome: "descriptors differ",
      reason: expect.stringMatching(/chunks of 64 KiB here, 1024 KiB at the peer/),
    });
  });

  it("a connect whose path insists on that channel fails with the listener's reason", async () => {
    const { client, l } = await chunkedEnds();
    await expect(client.connect(l.addresses()[0]!, { path: { channels: ["chunked"] } })).rejects.toMatchObject({
      code: "ERR_TP_NEGOTIATION",
      message: expect.stringMatching(/the listener's reasons: chunked: cpu:0->cpu:0: .*chunks of 64 KiB here, 1024 KiB at the peer/),
    });
  });

  it("a backend only one end has is named on both", async () => {
    const { here, there } = await both(["uv://127.0.0.1:0"], { setup: (c) => c.registerChannel(5000, "only-here", fastChannel()) });
    expect(verdict(there, "channel", "only-here")).toMatchObject({ by: "here", outcome: "not registered" });
    expect(verdict(here, "channel", "only-here")).toMatchObject({ by: "there", outcome: "not registered" });
  });
});

/** A third party's channel that pairs only with ends cutting tensors into chunks of the same size, and says why not. */
function chunkedChannel(chunkKiB: number) {
  return {
    isViable: () => ({ viable: true as const }),
    deviceDescriptors: () => [{ device: { type: "cpu", index: 0 }, descriptor: `chunk=${chunkKiB}` }],
    numConnectionsNeeded: () => 1,
    canCommunicateWithRemote: (a: string, b: string) => a === b,
    describeMismatch: (local: string, remote: string) => `chunks of ${local.slice(6)} KiB here, ${remote.slice(6)} KiB at the peer`,
    createChannel: () => {
      throw new Error("never chosen");
    },
    close: async () => {},
  };
}

/** A channel that runs and matches nothing, so that it is offered but never chosen. */
function fastChannel() {
  return {
    isViable: () => ({ viable: true as const }),
    deviceDescriptors: () => [{ device: { type: "cpu", index: 0 }, descriptor: `fast-${process.pid}-${Math.random()}` }],
    numConnectionsNeeded: () => 1,
    canCommunicateWithRemote: (a: string, b: string) => a === b,
    createChannel: () => {
      throw new Error("never chosen");
    },
    close: async () => {},
  };
}

describe("a hostile peer's brochure", () => {
  it("costs the listener what the peer sent, not what its names multiply into, and shows nothing that forges a line", async () => {
    const server = await context({ transports: ["uv"], channels: ["basic"] });
    const l = await server.listen("uv://127.0.0.1:0");
    closeLater(() => l.close());
    const many = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}\u001b[31m\n\u2028forged: chosen`);
    const transports = new Map<string, string>([["uv", "uv:*"], ...many("t", 300).map((n) => [n, "x"] as [string, string])]);
    // First, a device the channel pairs with (its descriptor matches). (One whose type is no name fails the brochure: peer-text.test.ts.)
    const devices = new Map([["x:0", { device: { type: "x", index: 0 }, descriptor: "any" }]]);
    // Within the 1024 entries a brochure may hold (past them, it is refused as it is decoded).
    for (let i = 0; i < 400; i++) devices.set(`cpu:${i}`, { device: { type: "cpu", index: i }, descriptor: `junk\u001b${i}` });
    const channels = new Map<string, Map<string, { device: { type: string; index: number }; descriptor: string }>>([
      ["basic", devices],
      ...many("c", 300).map((n) => [n, new Map()] as [string, Map<string, never>]),
      [
        "tensorpipe-js.path-report",
        new Map([
          ["report:0", { device: { type: "report", index: 0 }, descriptor: JSON.stringify({ offered: { transports: [], channels: [] }, verdicts: [] }) }],
        ]),
      ],
    ]);
    const brochure = protocol.encodeBrochure({ transportDomainDescriptors: transports, channelDeviceDescriptors: channels });
    expect(brochure.length).toBeLessThan(1 << 20);
    const port = Number(l.addresses()[0]!.split(":").at(-1));
    const main = await RawSocket.connect(port);
    main.write(onTheWire([protocol.encodePacket({ kind: "spontaneous", contextName: "" }), brochure]));
    const frame = await main.readFrame();
    // The answer, report included, is bounded by the verdicts it keeps (64 at most), whatever was offered.
    expect(frame.length).toBeLessThan(32 * 1024);
    const answer = protocol.decodeBrochureAnswer(frame);
    const report = JSON.parse(answer.channelDeviceDescriptors.get("tensorpipe-js.path-report")!.get("report:0")!.descriptor) as { verdicts: PathVerdict[] };
    expect(report.verdicts.length).toBeLessThanOrEqual(64);
    for (const v of report.verdicts) expect(`${v.name} ${v.pair ?? ""} ${v.reason}`).not.toMatch(/[\u0000-\u001f\u2028]/);
    expect(report.verdicts).toContainEqual(expect.objectContaining({ outcome: "not registered", name: "(268 more)" }));
    main.socket.destroy();
    // And the listener goes on.
    const client = await context({ transports: ["uv"], channels: ["basic"] });
    const [a, b] = await Promise.all([client.connect(l.addresses()[0]!), l.accept()]);
    closeLater(() => a.close());
    expect(b.transport).toBe("uv");
  });
});
