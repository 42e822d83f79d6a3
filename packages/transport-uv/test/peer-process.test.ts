import { type ChildProcess, spawn } from "node:child_process";
import { once } from "node:events";
import { type Connection, ErrorCode } from "@tensorpipe/core/backend";
import { afterEach, describe, expect, it } from "vitest";
import { UvTransport } from "../src/index.js";

const uid = process.getuid!();
const isRoot = uid === 0;
const dist = JSON.stringify(new URL("../dist/index.js", import.meta.url).href);

// A child process that connects to `address` and stays until its stdin
// closes; `nobody` makes it drop to uid 65534 once connected.
async function connectedChild(address: string, nobody = false): Promise<{ child: ChildProcess; localAddress: string }> {
  const script = `
    import { UvTransport } from ${dist};
    const c = await new UvTransport().connect(${JSON.stringify(address)});
    if (${nobody}) { process.setgid(65534); process.setuid(65534); }
    console.log(c.localAddress);
    process.stdin.resume();
    process.stdin.on("end", () => process.exit(0));`;
  const child = spawn(process.execPath, ["--input-type=module", "-e", script], { stdio: ["pipe", "pipe", "inherit"] });
  let out = "";
  child.stdout!.on("data", (d) => (out += d));
  await expect.poll(() => out.includes("\n") || child.exitCode !== null, { timeout: 10_000 }).toBe(true);
  expect(child.exitCode).toBe(null);
  return { child, localAddress: out.trim() };
}

// The pid of a process that has just exited.
async function deadPid(): Promise<number> {
  const child = spawn(process.execPath, ["-e", ""]);
  await once(child, "exit");
  return child.pid!;
}

const denied = (pattern: RegExp) => expect.objectContaining({ code: ErrorCode.PERMISSION_DENIED, message: expect.stringMatching(pattern) });

// The address to connect to for each listen address: an IPv6 listener on
// [::] reached over IPv4 sees its peer at a v4-mapped address.
const sameAddress = (address: string) => address;
describe.each([
  ["IPv4", "127.0.0.1:0", sameAddress],
  ["IPv6", "[::1]:0", sameAddress],
  ["IPv4 to a dual-stack listener (v4-mapped)", "[::]:0", (address: string) => `127.0.0.1:${address.split(":").pop()}`],
])("uv provePeerProcess over %s", (_name, listenAddress, connectTo) => {
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0).reverse()) await c();
  });

  async function listen() {
    const transport = new UvTransport();
    closers.push(() => transport.close());
    const accepted: Connection[] = [];
    const listener = await transport.listen(listenAddress, (c) => accepted.push(c));
    closers.push(
      () => listener.close(),
      () => accepted.forEach((c) => c.close()),
    );
    return { transport, address: connectTo(listener.address()), accepted };
  }

  async function child(address: string, nobody = false) {
    const c = await connectedChild(address, nobody);
    closers.push(() => {
      c.child.kill();
      return once(c.child, "exit");
    });
    return c;
  }

  it("proves the child at the other end, and no other process", async () => {
    const { address, accepted } = await listen();
    const peer = await child(address);
    const bystander = await child(address);
    await expect.poll(() => accepted.length).toBe(2);
    // By port: a dual-stack listener sees the peer at its v4-mapped address.
    const port = (address: string) => address.split(":").pop();
    const conn = accepted.find((c) => port(c.remoteAddress) === port(peer.localAddress))!;
    expect(conn).toBeDefined();

    expect(conn.provePeerProcess!(peer.child.pid!)).toEqual({ pid: peer.child.pid, uids: [uid, uid, uid, uid] });
    // This process holds only its own end.
    expect(() => conn.provePeerProcess!(process.pid)).toThrow(denied(new RegExp(`process ${process.pid} holds no descriptor of the peer's TCP socket`)));
    // A bystander, even one connected to the same listener.
    expect(() => conn.provePeerProcess!(bystander.child.pid!)).toThrow(denied(/holds no descriptor/));
    // A process that is gone.
    const gone = await deadPid();
    expect(() => conn.provePeerProcess!(gone)).toThrow(denied(new RegExp(`no process ${gone}`)));
    for (const pid of [0, -1, 1.5, Number.NaN, 2 ** 40]) {
      expect(() => conn.provePeerProcess!(pid), String(pid)).toThrow(denied(/not a process/));
    }
    conn.close();
    expect(() => conn.provePeerProcess!(peer.child.pid!)).toThrow(expect.objectContaining({ code: ErrorCode.CLOSED }));
  });

  it("proves where the peer's socket is now, whatever it held when last asked", async () => {
    const { address, accepted } = await listen();
    // A process whose connection moves to a child of its own on "hand off".
    const [host, port] = [address.slice(0, address.lastIndexOf(":")).replace(/^\[|\]$/g, ""), address.split(":").pop()];
    const script = `
      const { connect } = require("node:net");
      const { spawn } = require("node:child_process");
      const s = connect(${port}, ${JSON.stringify(host)}, () => console.log("connected"));
      process.stdin.on("data", () => {
        const heir = spawn("sleep", ["60"], { stdio: ["ignore", "ignore", "ignore", s] });
        s.destroy();
        console.log("heir " + heir.pid);
      });`;
    const a = spawn(process.execPath, ["-e", script], { stdio: ["pipe", "pipe", "inherit"] });
    let out = "";
    a.stdout!.on("data", (d) => (out += d));
    closers.push(() => {
      const heir = /heir (\d+)/.exec(out);
      if (heir) process.kill(Number(heir[1]));
      a.kill();
      return once(a, "exit");
    });
    await expect.poll(() => accepted.length, { timeout: 10_000 }).toBe(1);
    const conn = accepted[0]!;
    expect(conn.provePeerProcess!(a.pid!).pid).toBe(a.pid);
    a.stdin!.write("hand off\n");
    await expect.poll(() => /heir (\d+)/.exec(out), { timeout: 10_000 }).toBeTruthy();
    const heir = Number(/heir (\d+)/.exec(out)![1]);
    expect(() => conn.provePeerProcess!(a.pid!)).toThrow(denied(new RegExp(`process ${a.pid} holds no descriptor`)));
    expect(conn.provePeerProcess!(heir).pid).toBe(heir);
  });

  it.skipIf(!isRoot)("reports the uids of a peer that changed user (needs root)", async () => {
    const { address, accepted } = await listen();
    const peer = await child(address, true);
    await expect.poll(() => accepted.length).toBe(1);
    expect(accepted[0]!.provePeerProcess!(peer.child.pid!).uids).toEqual([65534, 65534, 65534, 65534]);
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

describe("uv provePeerProcess out of file descriptors", () => {
  it("is ERR_TP_SYSTEM with EMFILE, not a refusal: it proved nothing either way", async () => {
    // Both ends in one process, proving itself, once every descriptor is taken.
    const script = `
      import { openSync } from "node:fs";
      import { UvTransport } from ${dist};
      const t = new UvTransport();
      const accepted = [];
      const l = await t.listen("127.0.0.1:0", (c) => accepted.push(c));
      const c = await t.connect(l.address());
      while (accepted.length === 0) await new Promise((r) => setTimeout(r, 5));
      const fds = [];
      try { for (;;) fds.push(openSync("/dev/null", "r")); } catch {}
      let out;
      try { c.provePeerProcess(process.pid); out = { ok: true }; } catch (e) { out = { code: e.code, errnoName: e.errnoName, message: e.message }; }
      console.log(JSON.stringify(out));
      process.exit(0);`;
    const child = spawn("bash", ["-c", `ulimit -n 64 && exec "$0" --input-type=module -e "$1"`, process.execPath, script], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    let out = "";
    child.stdout!.on("data", (d) => (out += d));
    await once(child, "exit");
    expect(JSON.parse(out)).toMatchObject({ code: ErrorCode.SYSTEM, errnoName: "EMFILE", message: expect.stringMatching(/out of file descriptors/) });
  });
});
