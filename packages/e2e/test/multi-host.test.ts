/**
 * Pipes between hosts: network namespaces joined by a bridge, with packet
 * loss (and delay where the kernel has netem), a link cut mid-transfer, a
 * listener several hosts reach at once, IPv6 link-local addresses. Skips,
 * saying why, where namespaces cannot be made (not root).
 */
import type { ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type PeerProcess, TestNetwork, spawnPeer } from "@tensorpipe/bench";

const why = TestNetwork.unavailable();
if (why) console.log(`multi-host tests skipped: ${why}`);
const clientScript = fileURLToPath(new URL("./scripts/remote-client.js", import.meta.resolve("@tensorpipe/bench")));

/** Runs remote-client.js on a host; resolves with the JSON lines it printed. */
function runClient(net: TestNetwork, host: string, job: object, onLine?: (o: Record<string, unknown>, child: ChildProcess) => void) {
  const child = net.spawn(host, process.execPath, [clientScript, JSON.stringify(job)]);
  const lines: Record<string, unknown>[] = [];
  createInterface({ input: child.stdout! }).on("line", (l) => {
    const o = JSON.parse(l) as Record<string, unknown>;
    lines.push(o);
    onLine?.(o, child);
  });
  return new Promise<Record<string, unknown>[]>((resolve) => child.on("exit", () => resolve(lines)));
}

describe.skipIf(why !== null)("multi-host", () => {
  let net: TestNetwork;
  const peers: PeerProcess[] = [];

  beforeAll(() => {
    net = TestNetwork.create(5, { lossPercent: 1, delayMs: 1 });
    console.log(
      `test network: ${net.applied.join(", ") || "no loss or delay available"}${TestNetwork.canDelay() ? "" : " (this kernel has no netem: no delay)"}`,
    );
  });

  afterAll(async () => {
    for (const p of peers) await p.stop();
    net?.destroy();
  });

  async function peerOn(host: string, args: string[] = [], address = net.host(host).address) {
    const p = await spawnPeer(address, ["--transports", "uv", ...args], { netns: net.host(host).namespace });
    peers.push(p);
    return p;
  }

  it.each(["basic", "mpt"])("carries messages between hosts over a lossy link with %s", async (channel) => {
    const peer = await peerOn("a", ["--channels", channel]);
    const out = await runClient(net, "b", { url: peer.url, transports: ["uv"], channels: [channel], scenario: "roundtrip", messages: 20, maxBytes: 4 << 20 });
    expect(out[0]).toEqual({ transport: "uv", channel });
    expect(out[1]).toEqual({ ok: true, messages: 20 });
  });

  it("writes from pipe.loan() between hosts as from any memory: plain memory, copied, left in place", async () => {
    // As between two machines: namespaces of one machine would pair cma (one boot, one pid namespace).
    const peer = await peerOn("a", ["--channels", "mpt,basic"]);
    const job = { url: peer.url, transports: ["uv"], channels: ["mpt", "basic"], scenario: "roundtrip", messages: 10, maxBytes: 4 << 20, loan: true };
    const out = await runClient(net, "b", job);
    expect(out[0]).toEqual({ transport: "uv", channel: "mpt" });
    expect(out[1]).toEqual({ ok: true, messages: 10, loans: { kept: 10, taken: 0 } });
  });

  it("pairs cma between network namespaces of one machine, its tensors sent inline: there is no process to prove", async () => {
    // One boot and one pid namespace, as containers sharing the host's pids: cma's descriptors pair.
    const peer = await peerOn("a", ["--channels", "cma"]);
    const out = await runClient(net, "b", { url: peer.url, transports: ["uv"], channels: ["cma"], scenario: "roundtrip", messages: 10, maxBytes: 4 << 20 });
    expect(out[0]).toEqual({ transport: "uv", channel: "cma" });
    expect(out[1]).toEqual({ ok: true, messages: 10 });
  });

  it("serves several hosts at once", async () => {
    const peer = await peerOn("a");
    const job = { url: peer.url, transports: ["uv"], channels: ["basic", "mpt"], scenario: "roundtrip", messages: 10, maxBytes: 1 << 20 };
    const [b, c] = await Promise.all([runClient(net, "b", job), runClient(net, "c", job)]);
    expect(b[1]).toEqual({ ok: true, messages: 10 });
    expect(c[1]).toEqual({ ok: true, messages: 10 });
  });

  it("reaches a listener on an IPv6 link-local address with a scope id", async () => {
    const [address] = net.linkLocal("a").split("%");
    const peer = await peerOn("a", ["--channels", "basic"], net.linkLocal("a"));
    expect(peer.url).toMatch(/^uv:\/\/\[fe80::/);
    const port = peer.url.split(":").at(-1);
    const url = `uv://[${address}%${net.host("b").device}]:${port}`;
    const out = await runClient(net, "b", { url, transports: ["uv"], channels: ["basic"], scenario: "roundtrip", messages: 3 });
    expect(out).toEqual([
      { transport: "uv", channel: "basic" },
      { ok: true, messages: 3 },
    ]);
  });

  it("a link cut mid-transfer fails both sides within their timeouts, no hang", async () => {
    const peer = await peerOn("a", ["--channels", "basic", "--timeout", "1500"]);
    let cutAt = 0;
    const out = await runClient(net, "c", { url: peer.url, transports: ["uv"], channels: ["basic"], scenario: "stream", timeout: 1500 }, (o) => {
      if (o.transferring) {
        net.cut("c");
        cutAt = Date.now();
      }
    });
    const ended = out.find((o) => "ended" in o)!;
    expect(ended.ended).toBe("ERR_TP_TIMEOUT");
    expect(Date.now() - cutAt).toBeLessThan(5000);
    await expect
      .poll(() => peer.events.find((e) => e.event === "pipe-ended"), { timeout: 5000 })
      .toMatchObject({
        code: "ERR_TP_TIMEOUT",
      });
  });

  // No operation has a timeout: only the transport's peer timeout (3 s
  // here, 30 s by default) can end them, through TCP keepalive and the
  // watch on bytes left unacknowledged.
  it.each([
    ["basic", "d"],
    ["mpt", "e"],
  ])("a link cut mid-transfer over %s fails both ends within the peer timeout, with no operation timeout", async (channel, host) => {
    const peerTimeout = 3000;
    const peer = await peerOn("a", ["--channels", channel, "--peer-timeout", String(peerTimeout)]);
    let cutAt = 0;
    // When the client says how it ended, not when its process is gone:
    // closing down may take a while on a loaded machine.
    let endedAt = 0;
    const job = { url: peer.url, transports: ["uv"], channels: [channel], peerTimeout, scenario: "stream", timeout: 0 };
    const out = await runClient(net, host, job, (o) => {
      if (o.transferring) {
        net.cut(host);
        cutAt = Date.now();
      }
      if ("ended" in o) endedAt = Date.now();
    });
    const ended = out.find((o) => "ended" in o)!;
    expect(ended).toMatchObject({ ended: "ERR_TP_CONNECTION_RESET", message: expect.stringMatching(/timed out|unreachable/) });
    expect(endedAt - cutAt).toBeLessThan(peerTimeout + 3000);
    await expect
      .poll(() => peer.events.find((e) => e.event === "pipe-ended"), { timeout: 2 * peerTimeout })
      .toMatchObject({
        code: "ERR_TP_CONNECTION_RESET",
      });
  });
});
