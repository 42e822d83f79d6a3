/**
 * Members in processes of their own: a crash seen as a loss by the others,
 * a lapsed lease claimed again, a three-node etcd that loses a node, and
 * members on several hosts (network namespaces) that find and dial each
 * other by name.
 */
import { execFileSync } from "node:child_process";
import { type Socket, createServer } from "node:net";
import { createContext } from "./context.js";
import { type Context, ErrorCode } from "@tensorpipe/core";
import { Etcd3 } from "etcd3";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type Member, type MembershipChange, type Registry, etcdStore, join, registryStore, serveRegistry } from "../src/index.js";
import { EtcdCluster, etcdMissing } from "./etcd-server.js";
import { MemberProcess } from "./member-process.js";

const backends = { transports: ["uv"], channels: ["basic"] };
const missing = etcdMissing();
const TTL = 2;

const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function front(name: string, store: (c: Context) => Parameters<typeof join>[1]["store"], listen = "uv://127.0.0.1:0"): Promise<Member> {
  const context = await createContext({ ...backends, name });
  cleanups.push(() => context.close());
  const m = await join(context, { listen, store: store(context) });
  cleanups.push(() => m.leave());
  return m;
}

async function spawnMember(args: string[], netns?: string): Promise<MemberProcess> {
  const p = await MemberProcess.start(args, netns);
  cleanups.push(() => p.kill());
  return p;
}

/** A TCP server on 127.0.0.1 that accepts and never says a word; resolves with its port. */
async function silentServer(): Promise<number> {
  const sockets: Socket[] = [];
  const silent = createServer((s) => sockets.push(s));
  await new Promise<void>((r) => silent.listen(0, "127.0.0.1", () => r()));
  cleanups.push(() => {
    for (const s of sockets) s.destroy();
    return new Promise((r) => silent.close(r));
  });
  return (silent.address() as { port: number }).port;
}

/** Resolves with the first change of `member` for `name` that `match` accepts. */
function changeOf(member: Member, name: string, match: (c: MembershipChange) => boolean): Promise<MembershipChange> {
  return new Promise((resolve) => {
    const on = (c: MembershipChange) => {
      if (c.member.name !== name || !match(c)) return;
      member.off("change", on);
      resolve(c);
    };
    member.on("change", on);
  });
}

async function echoes(m: Member, name: string, text: string): Promise<string> {
  const pipe = await m.pipe(name, { timeout: 10_000 });
  await pipe.write({ metadata: text });
  return (await pipe.readMessage({ timeout: 10_000 })).metadata;
}

describe.skipIf(missing !== undefined)(`on etcd${missing ? ` (${missing})` : ""}`, () => {
  let etcd: EtcdCluster;
  let prefix = 0;
  beforeAll(async () => {
    etcd = await EtcdCluster.start(1);
  });
  afterAll(() => etcd?.stop());
  const store = (p: string) => () => etcdStore({ hosts: etcd.hosts, prefix: p, ttl: TTL, requestTimeout: 1000 });

  it("sees a member that crashed as lost once its lease expires", async () => {
    const p = `/crash/${prefix++}/`;
    const a = await front("front", store(p));
    const worker = await spawnMember(["worker", "uv://127.0.0.1:0", "etcd", etcd.hosts.join(","), p, String(TTL)]);
    await a.waitFor("worker", { timeout: 5000 });
    expect(await echoes(a, "worker", "x")).toBe("worker:x");
    const lost = changeOf(a, "worker", (c) => c.type === "left");
    const killed = Date.now();
    await worker.kill();
    expect(await lost).toMatchObject({ type: "left", reason: "lost" });
    // Within the lease's TTL, and a little for etcd's expiry sweep.
    expect(Date.now() - killed).toBeLessThan((TTL + 3) * 1000);
    await expect(a.pipe("worker")).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND });
  });

  it("claims its name again when its lease lapsed, and the others see it back", async () => {
    const p = `/lapse/${prefix++}/`;
    const a = await front("front", store(p));
    const b = await front("worker", store(p));
    await a.waitFor("worker", { timeout: 5000 });
    const left = changeOf(a, "worker", (c) => c.type === "left");
    const back = changeOf(a, "worker", (c) => c.type === "joined");
    // The lease ends under the member, as when etcd lost it.
    const admin = new Etcd3({ hosts: etcd.hosts });
    try {
      const kv = await admin.namespace(p).get("worker").exec();
      await admin.leaseClient.leaseRevoke({ ID: kv.kvs[0]!.lease });
    } finally {
      admin.close();
    }
    expect(await left).toMatchObject({ reason: "lost" });
    expect(await back).toMatchObject({ type: "joined", member: { name: "worker", urls: b.urls } });
    expect(b.hasLeft).toBe(false);
  });

  it("stays a member through an etcd outage longer than its lease: its own record is taken over, not fought for", async () => {
    const p = `/outage/${prefix++}/`;
    const a = await front("front", store(p));
    const b = await front("worker", store(p));
    await a.waitFor("worker", { timeout: 5000 });
    const events: string[] = [];
    b.on("nameLost", (e) => events.push(`nameLost ${e.message}`));
    a.on("change", (c) => events.push(`${c.type} ${c.member.name}`));
    await etcd.nodes[0]!.kill();
    // Past twice the lease: the client gives its lease up, while etcd (stopped) keeps it and renews it when it starts.
    await new Promise((r) => setTimeout(r, (2 * TTL + 1) * 1000));
    await etcd.nodes[0]!.start("existing");
    await expect.poll(() => a.stale, { timeout: 10_000 }).toBeUndefined();
    // Past the old lease's life too: the record it holds now is under a lease it keeps alive.
    await new Promise((r) => setTimeout(r, (TTL + 2) * 1000));
    expect(events.filter((e) => e.startsWith("nameLost"))).toEqual([]);
    expect(b.hasLeft).toBe(false);
    expect(a.member("worker")?.pid).toBe(process.pid);
    expect(events.filter((e) => e === "left worker")).toEqual([]);
  });

  it("writes its record again when it is deleted behind its back", async () => {
    const p = `/deleted/${prefix++}/`;
    const a = await front("front", store(p));
    await front("worker", store(p));
    await a.waitFor("worker", { timeout: 5000 });
    const admin = new Etcd3({ hosts: etcd.hosts });
    cleanups.push(() => admin.close());
    await admin.namespace(p).delete().key("worker");
    await expect.poll(async () => (await admin.namespace(p).get("worker").string()) !== null, { timeout: 5000 }).toBe(true);
    await expect.poll(() => a.member("worker")?.name, { timeout: 5000 }).toBe("worker");
  });

  it("bounds the time pipe() spends on a record's URLs that never answer", async () => {
    const p = `/silent/${prefix++}/`;
    const port = await silentServer();
    const context = await createContext({ ...backends, name: "front" });
    cleanups.push(() => context.close());
    const a = await join(context, { listen: "uv://127.0.0.1:0", store: store(p)(), dialTimeout: 500 });
    cleanups.push(() => a.leave());
    const admin = new Etcd3({ hosts: etcd.hosts });
    cleanups.push(() => admin.close());
    const record = { ...a.member("front")!, name: "tarpit", urls: Array(16).fill(`uv://127.0.0.1:${port}`) };
    await admin.namespace(p).put("tarpit").value(JSON.stringify(record));
    await a.waitFor("tarpit", { timeout: 5000 });
    const started = Date.now();
    await expect(a.pipe("tarpit")).rejects.toMatchObject({ message: expect.stringContaining("gave up after 500 ms") });
    expect(Date.now() - started).toBeLessThan(2000);
  });

  it("reaches a record's later URL when its first never answers", async () => {
    const p = `/slowfirst/${prefix++}/`;
    const port = await silentServer();
    const context = await createContext({ ...backends, name: "front" });
    cleanups.push(() => context.close());
    const a = await join(context, { listen: "uv://127.0.0.1:0", store: store(p)(), dialTimeout: 3000 });
    cleanups.push(() => a.leave());
    const worker = await spawnMember(["worker", "uv://127.0.0.1:0", "etcd", etcd.hosts.join(","), p, String(TTL), `uv://127.0.0.1:${port}`]);
    void worker;
    await a.waitFor("worker", { timeout: 5000 });
    expect(a.member("worker")!.urls[0]).toBe(`uv://127.0.0.1:${port}`);
    expect(await echoes(a, "worker", "second")).toBe("worker:second");
  });

  it("reports members past its maxMembers and ignores them", async () => {
    const p = `/many/${prefix++}/`;
    const context = await createContext({ ...backends, name: "front" });
    cleanups.push(() => context.close());
    const a = await join(context, { listen: "uv://127.0.0.1:0", store: store(p)(), maxMembers: 2 });
    cleanups.push(() => a.leave());
    const invalid: Error[] = [];
    a.on("invalidRecord", (e) => invalid.push(e));
    const admin = new Etcd3({ hosts: etcd.hosts });
    cleanups.push(() => admin.close());
    for (const name of ["b", "c"])
      await admin
        .namespace(p)
        .put(name)
        .value(JSON.stringify({ ...a.member("front")!, name }));
    await expect.poll(() => invalid.length, { timeout: 5000 }).toBe(1);
    expect(invalid[0]!.message).toContain("more than 2 members");
    expect(a.members()).toHaveLength(2);
  });

  it("refuses a prefix that is not a folder", () => {
    expect(() => etcdStore({ hosts: etcd.hosts, prefix: "/app" })).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: expect.stringContaining('ends with "/"') }),
    );
  });

  it("refuses the name to a second process while the first holds it, and gives it once the first is gone", async () => {
    const p = `/unique/${prefix++}/`;
    const a = await front("front", store(p));
    const first = await spawnMember(["worker", "uv://127.0.0.1:0", "etcd", etcd.hosts.join(","), p, String(TTL)]);
    await a.waitFor("worker", { timeout: 5000 });
    await expect(MemberProcess.start(["worker", "uv://127.0.0.1:0", "etcd", etcd.hosts.join(","), p, String(TTL)])).rejects.toThrow(
      /ERR_TP_NAME_TAKEN|is held by a live member/,
    );
    await first.stop();
    const second = await spawnMember(["worker", "uv://127.0.0.1:0", "etcd", etcd.hosts.join(","), p, String(TTL)]);
    await expect.poll(() => a.member("worker")?.data.pid, { timeout: 5000 }).toBe(String(second.pid));
    expect(await echoes(a, "worker", "y")).toBe("worker:y");
  });
});

describe.skipIf(missing !== undefined)("on a three-node etcd that loses a node", () => {
  let etcd: EtcdCluster;
  beforeAll(async () => {
    etcd = await EtcdCluster.start(3);
  });
  afterAll(() => etcd?.stop());

  it("goes on: joins, leaves and pipes by name, with one node down", async () => {
    const store = () => etcdStore({ hosts: etcd.hosts, prefix: "/three/", ttl: TTL, requestTimeout: 1000 });
    const a = await front("front", store);
    const w1 = await spawnMember(["w1", "uv://127.0.0.1:0", "etcd", etcd.hosts.join(","), "/three/", String(TTL)]);
    await a.waitFor("w1", { timeout: 5000 });
    await etcd.nodes[0]!.kill();
    const w2 = await spawnMember(["w2", "uv://127.0.0.1:0", "etcd", etcd.hosts.join(","), "/three/", String(TTL)]);
    await a.waitFor("w2", { timeout: 10_000 });
    expect(await echoes(a, "w2", "z")).toBe("w2:z");
    const left = changeOf(a, "w1", (c) => c.type === "left");
    await w1.stop();
    expect(await left).toMatchObject({ reason: "left" });
    void w2;
  });
});

describe("on the embedded registry", () => {
  let host: Context;
  let registry: Registry;
  beforeAll(async () => {
    host = await createContext({ ...backends, name: "registry" });
    registry = await serveRegistry(host, { listen: "uv://127.0.0.1:0" });
  });
  afterAll(() => host?.close());
  const store = () => (c: Context) => registryStore(c, registry.url, { requestTimeout: 1000 });

  it("sees a member that crashed as lost as soon as its pipe to the registry ends", async () => {
    const a = await front("front", store());
    const worker = await spawnMember(["worker", "uv://127.0.0.1:0", "registry", registry.url]);
    await a.waitFor("worker", { timeout: 5000 });
    const lost = changeOf(a, "worker", (c) => c.type === "left");
    await worker.kill();
    expect(await lost).toMatchObject({ reason: "lost" });
  });

  it("gives a new member its view at once, right after the registry starts", async () => {
    const fresh = await createContext({ ...backends, name: "fresh-registry" });
    cleanups.push(() => fresh.close());
    const r = await serveRegistry(fresh, { listen: "uv://127.0.0.1:0" });
    const started = Date.now();
    const context = await createContext({ ...backends, name: "early" });
    cleanups.push(() => context.close());
    const m = await join(context, { listen: "uv://127.0.0.1:0", store: registryStore(context, r.url), timeout: 1000 });
    cleanups.push(() => m.leave());
    expect(Date.now() - started).toBeLessThan(1000);
  });

  it("leaves, with nameLost, a member whose name another took while the registry was away", async () => {
    const a = await front("worker", store());
    const lost = new Promise<Error>((r) => a.once("nameLost", r));
    const url = registry.url;
    registry.close();
    registry = await serveRegistry(host, { listen: url, startupGrace: 0 });
    // Another process under the name gets there first.
    const impostor = await createContext({ ...backends, name: "worker" });
    cleanups.push(() => impostor.close());
    const b = await join(impostor, { listen: "uv://127.0.0.1:0", store: registryStore(impostor, url) });
    cleanups.push(() => b.leave());
    expect(await lost).toMatchObject({ code: ErrorCode.NAME_TAKEN });
    await expect.poll(() => a.hasLeft).toBe(true);
    expect(registry.names()).toEqual(["worker"]);
  });

  it("refuses a registry URL that is not a TensorPipe one", async () => {
    const context = await createContext({ ...backends, name: "x" });
    cleanups.push(() => context.close());
    expect(() => registryStore(context, "http://127.0.0.1:7000")).toThrow(
      expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: expect.stringContaining("TensorPipe URL") }),
    );
  });

  it("keeps members' pipes through the registry's restart, and they claim their names again", async () => {
    const a = await front("front", store());
    const worker = await spawnMember(["worker", "uv://127.0.0.1:0", "registry", registry.url]);
    await a.waitFor("worker", { timeout: 5000 });
    const pipe = await a.pipe("worker");
    const url = registry.url;
    const unavailable = new Promise((r) => a.once("unavailable", r));
    registry.close();
    expect(await unavailable).toMatchObject({ code: ErrorCode.UNAVAILABLE, message: expect.stringContaining("went away") });
    await pipe.write({ metadata: "still" });
    expect((await pipe.readMessage({ timeout: 5000 })).metadata).toBe("worker:still");
    registry = await serveRegistry(host, { listen: url });
    await expect.poll(() => registry.names().sort(), { timeout: 10_000 }).toEqual(["front", "worker"]);
    await expect.poll(() => a.stale, { timeout: 5000 }).toBeUndefined();
    expect(a.member("worker")?.pid).toBe(worker.pid);
  });
});

/** Runs `ip` with `args`; throws with its stderr. */
const ip = (...args: string[]) => execFileSync("ip", args, { stdio: ["ignore", "ignore", "pipe"] });

/** Why members cannot run in network namespaces here, or undefined. */
function netnsMissing(): string | undefined {
  if (process.getuid?.() !== 0) return "network namespaces need root";
  try {
    ip("netns", "add", "tp-probe");
    ip("netns", "del", "tp-probe");
    ip("link", "add", "tp-probe", "type", "bridge");
    ip("link", "del", "tp-probe");
    return undefined;
  } catch (e) {
    return `no network namespaces or bridges here (${(e as Error).message.split("\n")[0]})`;
  }
}

const noNetns = missing ?? netnsMissing();

describe.skipIf(noNetns !== undefined)(`on three hosts (network namespaces on a bridge)${noNetns ? ` (${noNetns})` : ""}`, () => {
  const tag = `tp${process.pid % 10000}`;
  const hosts = [1, 2, 3].map((i) => ({ ns: `${tag}h${i}`, veth: `${tag}v${i}`, peer: `${tag}p${i}`, ip: `10.231.${process.pid % 200}.${10 + i}` }));
  const bridge = `${tag}br`;
  const bridgeIp = `10.231.${process.pid % 200}.1`;
  let etcd: EtcdCluster;

  beforeAll(async () => {
    ip("link", "add", bridge, "type", "bridge");
    ip("addr", "add", `${bridgeIp}/24`, "dev", bridge);
    ip("link", "set", bridge, "up");
    for (const h of hosts) {
      ip("netns", "add", h.ns);
      ip("link", "add", h.veth, "type", "veth", "peer", "name", h.peer);
      ip("link", "set", h.veth, "master", bridge);
      ip("link", "set", h.veth, "up");
      ip("link", "set", h.peer, "netns", h.ns);
      ip("-n", h.ns, "addr", "add", `${h.ip}/24`, "dev", h.peer);
      ip("-n", h.ns, "link", "set", h.peer, "up");
      ip("-n", h.ns, "link", "set", "lo", "up");
    }
    etcd = await EtcdCluster.start(1, bridgeIp);
  });
  afterAll(async () => {
    await etcd?.stop();
    for (const h of hosts) {
      try {
        ip("netns", "del", h.ns);
      } catch {}
    }
    try {
      ip("link", "del", bridge);
    } catch {}
  });

  it("finds members on other hosts by name, dials them over TCP (their shm URLs are not for this host), and sees one crash", async () => {
    const p = "/hosts/";
    const args = (name: string, h: (typeof hosts)[number]) => [name, `shm://,uv://${h.ip}:0`, "etcd", etcd.hosts.join(","), p, String(TTL)];
    const workers = await Promise.all(hosts.map((h, i) => spawnMember(args(`host${i + 1}`, h), h.ns)));
    const a = await front("front", () => etcdStore({ hosts: etcd.hosts, prefix: p, ttl: TTL, requestTimeout: 1000 }), `uv://${bridgeIp}:0`);
    for (let i = 1; i <= 3; i++) await a.waitFor(`host${i}`, { timeout: 10_000 });
    for (let i = 1; i <= 3; i++) {
      expect(a.member(`host${i}`)!.urls[0]).toMatch(/^shm:\/\//);
      expect(await echoes(a, `host${i}`, "ping")).toBe(`host${i}:ping`);
      expect((await a.pipe(`host${i}`)).transport).toBe("uv");
    }
    // A worker saw the others, across namespaces: in its first read, or as they joined; never itself as a change.
    const seenBy = (w: MemberProcess) => [
      ...((w.events.find((e) => e.event === "ready")?.members as string[] | undefined) ?? []),
      ...w.events.filter((e) => e.event === "change" && e.type === "joined").map((e) => e.name as string),
    ];
    await expect.poll(() => seenBy(workers[0]!), { timeout: 10_000 }).toEqual(expect.arrayContaining(["front", "host2", "host3"]));
    expect(workers[0]!.events.some((e) => e.event === "change" && e.name === "host1")).toBe(false);
    const lost = changeOf(a, "host2", (c) => c.type === "left");
    await workers[1]!.kill();
    expect(await lost).toMatchObject({ reason: "lost" });
    expect(await echoes(a, "host3", "still")).toBe("host3:still");
  });
});
