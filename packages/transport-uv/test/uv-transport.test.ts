import { lookup } from "node:dns/promises";
import { spawnSync } from "node:child_process";
import { fstatSync, readdirSync } from "node:fs";
import { Socket } from "node:net";
import { Worker } from "node:worker_threads";
import { CPU_DEVICE, type Connection, Context, ErrorCode } from "@tensorpipe/core/backend";
import { afterEach, describe, expect, it } from "vitest";
import { UvTransport, interfaceAddress, registerUvTransport } from "../src/index.js";

describe("uv transport addressing", () => {
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0)) await c();
  });

  it("finds the loopback interface's address by name", () => {
    expect(interfaceAddress("lo")).toBe("127.0.0.1");
    expect(interfaceAddress("lo", 6)).toBe("::1");
    expect(() => interfaceAddress("no-such-if0")).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG }));
  });

  it("listens on the named interface for host '*', and connects from it", async () => {
    const t = new UvTransport({ interface: "lo" });
    closers.push(() => t.close());
    const accepted: string[] = [];
    const l = await t.listen("*:0", (c) => {
      accepted.push(c.remoteAddress);
      c.close();
    });
    closers.push(() => l.close());
    expect(l.address()).toMatch(/^127\.0\.0\.1:\d+$/);
    const c = await t.connect(l.address());
    closers.push(() => c.close());
    expect(c.localAddress).toMatch(/^127\.0\.0\.1:\d+$/);
    await expect.poll(() => accepted).toEqual([c.localAddress]);
  });

  it("never picks an interface silently: a listen address without a host is an error", async () => {
    const t = new UvTransport();
    await expect(t.listen("*:0", () => undefined)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    await expect(t.listen(":0", () => undefined)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    await expect(t.listen("127.0.0.1", () => undefined)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
  });

  it("resolves host names once and reports names that do not resolve", async () => {
    const t = new UvTransport();
    const l = await t.listen("localhost:0", (c) => c.close());
    closers.push(() => l.close());
    expect(l.address()).toMatch(/^(127\.0\.0\.1|\[::1\]):\d+$/);
    await expect(t.connect("no-such-host.invalid:1")).rejects.toMatchObject({
      code: ErrorCode.CONNECTION_REFUSED,
      message: /cannot resolve host "no-such-host.invalid"/,
    });
  });

  it("reports an address in use with its errno name", async () => {
    const t = new UvTransport();
    const l = await t.listen("127.0.0.1:0", () => undefined);
    closers.push(() => l.close());
    await expect(t.listen(l.address(), () => undefined)).rejects.toMatchObject({
      code: ErrorCode.SYSTEM,
      errnoName: "EADDRINUSE",
    });
  });

  it("reports a host that does not resolve with what Node's own lookup says: its errno, name and call", async () => {
    const host = "no-such-host.invalid";
    const node = await lookup(host).then(
      () => undefined,
      (e: NodeJS.ErrnoException) => e,
    );
    expect(node).toBeDefined();
    await expect(new UvTransport().connect(`${host}:1`)).rejects.toMatchObject({
      code: ErrorCode.CONNECTION_REFUSED,
      errnoName: node!.code,
      errno: node!.errno,
      syscall: node!.syscall,
    });
  });

  it("accepts tcp:// as another name for uv://, over IPv4 and IPv6", async () => {
    const make = () => {
      const ctx = new Context();
      registerUvTransport(ctx);
      ctx.registerChannel(0, "basic", {
        isViable: () => ({ viable: true }),
        deviceDescriptors: () => [{ device: CPU_DEVICE, descriptor: "any" }],
        numConnectionsNeeded: () => 1,
        canCommunicateWithRemote: (a, b) => a === b,
        createChannel: () => ({ send: async () => {}, recv: async () => {}, close: () => {} }),
        close: async () => {},
      });
      closers.push(() => ctx.close());
      return ctx;
    };
    const server = make();
    const client = make();
    const listener = await server.listen(["tcp://[::1]:0"]);
    expect(listener.addresses()[0]).toMatch(/^tcp:\/\/\[::1\]:\d+$/);
    const [pipe, accepted] = await Promise.all([client.connect(listener.addresses()[0]!), listener.accept()]);
    expect(pipe.transport).toBe("uv");
    await pipe.write({ metadata: "over v6" });
    expect((await accepted.readMessage()).metadata).toBe("over v6");
  });
});

describe("uv connection hand-over (detach)", () => {
  const transport = new UvTransport();

  async function pair(): Promise<[Connection, Connection]> {
    const accepted: Connection[] = [];
    const listener = await transport.listen("127.0.0.1:0", (c) => accepted.push(c));
    const here = await transport.connect(listener.address());
    await expect.poll(() => accepted.length).toBe(1);
    listener.close();
    return [here, accepted[0]!];
  }

  function frame(bytes: Uint8Array): Buffer {
    const header = Buffer.alloc(8);
    header.writeBigUInt64LE(BigInt(bytes.byteLength));
    return Buffer.concat([header, bytes]);
  }

  it("hands the socket over with the bytes it had read ahead, and closes itself", async () => {
    const [a, b] = await pair();
    const first = new Uint8Array([1, 2, 3]);
    await a.write([first, new Uint8Array([4, 5])]);
    // The connection reads ahead as soon as it is open.
    await new Promise((r) => setTimeout(r, 50));
    const socket = await b.detach!();
    expect(socket).not.toBeNull();
    expect(Buffer.from(socket!.readAhead)).toEqual(Buffer.concat([frame(first), frame(new Uint8Array([4, 5]))]));
    expect(await b.closed).toBeUndefined();
    await expect(b.read(10)).rejects.toMatchObject({ code: ErrorCode.CLOSED });

    // The socket itself is still connected, both ways.
    const raw = new Socket({ fd: socket!.take(), readable: true, writable: true });
    expect(() => socket!.take()).toThrow(expect.objectContaining({ code: ErrorCode.CLOSED }));
    const got = new Promise<Buffer>((resolve) => raw.once("data", resolve));
    await a.write([new Uint8Array([9])]);
    expect(await got).toEqual(frame(new Uint8Array([9])));
    raw.write(frame(new Uint8Array([7, 7])));
    expect(await a.read(10)).toEqual(new Uint8Array([7, 7]));
    raw.destroy();
    await expect(a.read(10)).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
  });

  it("refuses while a read is pending, and leaves the connection working", async () => {
    const [a, b] = await pair();
    const pending = b.read(10);
    await expect(b.detach!()).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    await a.write([new Uint8Array([5])]);
    expect(await pending).toEqual(new Uint8Array([5]));
    a.close();
    b.close();
  });

  it("refuses on a closed connection", async () => {
    const [a, b] = await pair();
    b.close();
    await expect(b.detach!()).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    a.close();
  });

  it("closes a socket handed over once, and twice without harm", async () => {
    const [a, b] = await pair();
    const socket = (await b.detach!())!;
    expect(fstatSync(socket.fd).isSocket()).toBe(true);
    socket.close();
    socket.close();
    expect(() => fstatSync(socket.fd)).toThrow(expect.objectContaining({ code: "EBADF" }));
    await expect(a.read(10)).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
  });

  it("closes a socket nobody took when its worker is terminated", async () => {
    const fds = () => readdirSync("/proc/self/fd").length;
    const before = fds();
    const worker = new Worker(new URL("./workers/detach-and-wait.mjs", import.meta.url));
    const fd = await new Promise<number>((resolve, reject) => {
      worker.once("message", (m: { detached: number }) => resolve(m.detached));
      worker.once("error", reject);
    });
    expect(fstatSync(fd).isSocket()).toBe(true);
    await worker.terminate();
    await expect.poll(fds, { timeout: 2000 }).toBe(before);
  });
});

describe("uv peer timeout", () => {
  const MiB = 1 << 20;

  it.each([
    ["peerTimeout", "10", 'peerTimeout must be a whole number of ms from 0 to 2147483647, got the string "10"'],
    ["peerTimeout", -1, "peerTimeout must be a whole number of ms from 0 to 2147483647, got number -1"],
    ["peerTimeout", 1.5, "peerTimeout must be a whole number of ms from 0 to 2147483647, got number 1.5"],
    ["family", "4", 'family must be one of 4, 6, got the string "4"'],
    ["family", 5, "family must be one of 4, 6, got number 5"],
    ["interface", 10, "interface must be a non-empty string, got number 10"],
  ])("refuses %s %s, saying what it takes and got", (name, bad, said) => {
    expect(() => new UvTransport({ [name]: bad } as never)).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: `UvTransportOptions.${said}` }),
    );
  });

  /** A connected pair of connections of transports with `peerTimeout`. */
  async function pair(peerTimeout: number): Promise<[Connection, Connection, () => void]> {
    const transport = new UvTransport({ peerTimeout });
    let accepted: Connection | undefined;
    const listener = await transport.listen("127.0.0.1:0", (c) => (accepted = c));
    const here = await transport.connect(listener.address());
    await expect.poll(() => accepted).toBeDefined();
    return [
      here,
      accepted!,
      () => {
        here.close();
        accepted!.close();
        listener.close();
        void transport.close();
      },
    ];
  }

  it("waits for a reader that is alive but busy far longer than the timeout: its kernel answers for it", async () => {
    const [writer, reader, close] = await pair(1000);
    try {
      const data = new Uint8Array(64 * MiB).fill(5);
      const written = writer.write([data]);
      let failed: unknown;
      written.catch((e: unknown) => (failed = e));
      // The reader's window stays shut for three timeouts.
      await new Promise((r) => setTimeout(r, 3000));
      expect(failed).toBeUndefined();
      const into = new Uint8Array(64 * MiB);
      await reader.readInto(into);
      await written;
      expect(into.every((b) => b === 5)).toBe(true);
    } finally {
      close();
    }
  });
});

const canCut = process.platform === "linux" && process.getuid?.() === 0 && spawnSync("unshare", ["-n", "nft", "--version"]).status === 0;

describe.skipIf(!canCut)("uv peer timeout, with the link cut (needs root, unshare and nft)", () => {
  it("sees a peer that goes silent while its window is shut, within a few of TCP's probes", async () => {
    // In a network namespace of its own: its loopback is dropped once the reader's window is shut.
    const script = `
      import { execFileSync } from "node:child_process";
      import { UvTransport } from ${JSON.stringify(new URL("../dist/index.js", import.meta.url).href)};
      execFileSync("ip", ["link", "set", "lo", "up"]);
      const transport = new UvTransport({ peerTimeout: 1000 });
      let reader;
      const listener = await transport.listen("127.0.0.1:0", (c) => (reader = c));
      const writer = await transport.connect(listener.address());
      const written = writer.write([new Uint8Array(64 << 20)]);
      const ended = written.then(() => "resolved", (e) => e.code + " " + e.message);
      await new Promise((r) => setTimeout(r, 2500));
      const shutFor = await Promise.race([ended, new Promise((r) => setTimeout(() => r("pending"), 0))]);
      execFileSync("nft", ["-f", "-"], { input: "table inet cut { chain out { type filter hook output priority 0; policy drop; }; }" });
      const cut = Date.now();
      const how = await ended;
      console.log(JSON.stringify({ shutFor, how, afterCut: Date.now() - cut }));
      process.exit(0);`;
    const child = spawnSync("unshare", ["-n", process.execPath, "--input-type=module", "-e", script], { encoding: "utf8", timeout: 60_000 });
    expect(child.stderr).toBe("");
    const out = JSON.parse(child.stdout.trim().split("\n").at(-1)!) as { shutFor: string; how: string; afterCut: number };
    console.log(`a peer silent behind a shut window: seen after ${out.afterCut} ms`);
    // Alive but not reading for 2.5 timeouts: waited for.
    expect(out.shutFor).toBe("pending");
    expect(out.how).toMatch(/^ERR_TP_CONNECTION_RESET send: connection timed out/);
    expect(out.afterCut).toBeLessThan(20_000);
  });
});
