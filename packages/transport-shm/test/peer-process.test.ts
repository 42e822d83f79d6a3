import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { type Connection, ErrorCode } from "@tensorpipe/core/backend";
import { afterEach, describe, expect, it } from "vitest";
import { ShmTransport } from "../src/index.js";

const uid = process.getuid!();
const isRoot = uid === 0;
const dist = JSON.stringify(new URL("../dist/index.js", import.meta.url).href);

// A child process that connects to `address` and stays until its stdin
// closes; `nobody` makes it drop to uid 65534 once connected.
async function connectedChild(address: string, nobody = false): Promise<ChildProcess> {
  const script = `
    import { ShmTransport } from ${dist};
    const c = await new ShmTransport({ allowOtherUsers: ${nobody} }).connect(${JSON.stringify(address)});
    if (${nobody}) { process.setgid(65534); process.setuid(65534); }
    console.log("connected");
    process.stdin.resume();
    process.stdin.on("end", () => process.exit(0));`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["pipe", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  await expect.poll(() => out.includes("\n") || child.exitCode !== null, { timeout: 10_000 }).toBe(true);
  expect(out.trim()).toBe("connected");
  return child;
}

// The pid of a process that has just exited.
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ["-e", ""]);
  await once(child, "exit");
  return child.pid!;
}

const denied = (pattern: RegExp) => expect.objectContaining({ code: ErrorCode.PERMISSION_DENIED, message: expect.stringMatching(pattern) });

describe("shm provePeerProcess", () => {
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0).reverse()) await c();
  });

  async function listen(allowOtherUsers = false) {
    const transport = new ShmTransport({ allowOtherUsers });
    closers.push(() => transport.close());
    const accepted: Connection[] = [];
    const listener = await transport.listen("*", (c) => accepted.push(c));
    closers.push(
      () => listener.close(),
      () => accepted.forEach((c) => c.close()),
    );
    return { transport, address: listener.address(), accepted };
  }

  async function child(address: string, nobody = false) {
    const c = await connectedChild(address, nobody);
    closers.push(() => {
      c.kill();
      return once(c, "exit");
    });
    return c;
  }

  it("proves whoever holds the peer's socket now, not the process that connected and has gone (SO_PEERCRED)", async () => {
    const { address, accepted } = await listen();
    const hostilePeer = new URL("../build/Release/shm_hostile_peer", import.meta.url).pathname;
    const forked = spawn(hostilePeer, [address, "forked"], { stdio: ["pipe", "pipe", "inherit"] });
    closers.push(() => forked.stdin!.end());
    let out = "";
    forked.stdout!.on("data", (d) => (out += d));
    await expect.poll(() => out.includes("\n") && accepted.length === 1, { timeout: 10_000 }).toBe(true);
    const [connected, holder] = out.trim().split(" ").map(Number) as [number, number];
    await expect
      .poll(() => {
        try {
          process.kill(connected, 0);
          return true;
        } catch {
          return false;
        }
      })
      .toBe(false);
    // The pid the kernel recorded at connect() could be any process's by now.
    expect(() => accepted[0]!.provePeerProcess!(connected)).toThrow(denied(/no process|holds no descriptor/));
    expect(accepted[0]!.provePeerProcess!(holder)).toEqual({ pid: holder, uids: [uid, uid, uid, uid] });
  });

  it("proves the child at the other end, and no other process", async () => {
    const { address, accepted } = await listen();
    const peer = await child(address);
    const bystander = await child(address);
    await expect.poll(() => accepted.length).toBe(2);
    const conn = accepted.find((c) => c.remoteAddress.startsWith(`pid ${peer.pid} `))!;
    expect(conn).toBeDefined();

    expect(conn.provePeerProcess!(peer.pid!)).toEqual({ pid: peer.pid, uids: [uid, uid, uid, uid] });
    // This process holds only its own end.
    expect(() => conn.provePeerProcess!(process.pid)).toThrow(denied(new RegExp(`process ${process.pid} holds no descriptor of the peer's Unix socket`)));
    // A bystander, even one connected to the same listener.
    expect(() => conn.provePeerProcess!(bystander.pid!)).toThrow(denied(new RegExp(`process ${bystander.pid} holds no descriptor of the peer's Unix socket`)));
    // A process that is gone.
    const gone = await deadPid();
    expect(() => conn.provePeerProcess!(gone)).toThrow(denied(new RegExp(`no process ${gone}`)));
    for (const pid of [0, -1, 1.5, Number.NaN, 2 ** 40]) {
      expect(() => conn.provePeerProcess!(pid), String(pid)).toThrow(denied(/not a process/));
    }
    conn.close();
    expect(() => conn.provePeerProcess!(peer.pid!)).toThrow(expect.objectContaining({ code: ErrorCode.CLOSED }));
  });

  it.skipIf(!isRoot)("reports the uids of a peer that changed user (needs root)", async () => {
    const { address, accepted } = await listen(true);
    const peer = await child(address, true);
    await expect.poll(() => accepted.length).toBe(1);
    expect(accepted[0]!.provePeerProcess!(peer.pid!).uids).toEqual([65534, 65534, 65534, 65534]);
  });

  it("proves this process at both ends of a connection within it", async () => {
    const { transport, address, accepted } = await listen();
    const c = await transport.connect(address);
    closers.push(() => c.close());
    await expect.poll(() => accepted.length).toBe(1);
    expect(c.provePeerProcess!(process.pid)).toEqual({ pid: process.pid, uids: [uid, uid, uid, uid] });
    expect(accepted[0]!.provePeerProcess!(process.pid).pid).toBe(process.pid);
  });
});
