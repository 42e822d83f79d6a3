/**
 * Hostile members and hostile records: what a store hands a member is
 * untrusted, and so is every request the embedded registry reads. Each bad
 * input gets an error on its own connection or an `invalidRecord` event,
 * and the rest go on.
 */
import { createContext } from "./context.js";
import { type Context, ErrorCode, type TensorPipeError } from "@tensorpipe/core";
import { Etcd3 } from "etcd3";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { type Member, type Registry, etcdStore, join, registryStore, serveRegistry } from "../src/index.js";
import { EtcdCluster, etcdMissing } from "./etcd-server.js";

const secret = "correct horse battery staple";
const backends = { transports: ["uv"], channels: ["basic"] };
const cleanups: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});
const context = async (name: string, auth?: { secret: string }) => {
  const c = await createContext({ ...backends, name, auth });
  cleanups.push(() => c.close());
  return c;
};

describe("the embedded registry, under authentication", () => {
  let host: Context;
  let registry: Registry;
  beforeAll(async () => {
    host = await createContext({ ...backends, name: "registry", auth: { secret } });
    registry = await serveRegistry(host, { listen: "uv://127.0.0.1:0" });
  });
  afterAll(() => host?.close());
  const member = async (name: string): Promise<Member> => {
    const c = await context(name, { secret });
    const m = await join(c, { listen: "uv://127.0.0.1:0", store: registryStore(c, registry.url, { requestTimeout: 1000 }) });
    cleanups.push(() => m.leave());
    return m;
  };

  it("lets no one without the secret join, dial a member or be dialled", async () => {
    const alice = await member("alice");
    const outsider = await context("mallory");
    // The registry's listener drops it in the handshake, as any listener with a secret drops a peer without one.
    await expect(join(outsider, { listen: "uv://127.0.0.1:0", store: registryStore(outsider, registry.url), timeout: 5000 })).rejects.toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringMatching(/^the registry at .* refused this member: .*requires authentication/),
    });
    await expect(outsider.connect(alice.urls[0]!)).rejects.toMatchObject({
      code: ErrorCode.NEGOTIATION,
      message: expect.stringContaining("requires authentication"),
    });
    // Nor dialled: a holder of the secret refuses a listener that cannot prove it knows it.
    const outsiderListener = await outsider.listen("uv://127.0.0.1:0");
    const bob = await context("bob", { secret });
    await expect(bob.connect(outsiderListener.addresses()[0]!)).rejects.toMatchObject({ code: ErrorCode.PERMISSION_DENIED });
    expect(registry.names()).toEqual(["alice"]);
  });

  it("lets a member claim only the name its handshake proved, and touch only its own record", async () => {
    const alice = await member("alice");
    const mallory = await context("mallory", { secret });
    const store = registryStore(mallory, registry.url);
    cleanups.push(() => store.close());
    await expect(store.claim("alice", "{}", { lost: () => undefined })).rejects.toMatchObject({
      code: ErrorCode.PERMISSION_DENIED,
      message: expect.stringContaining('only the name its context gave in the handshake ("mallory")'),
    });
    await expect(store.claim("bob", "{}", { lost: () => undefined })).rejects.toMatchObject({ code: ErrorCode.PERMISSION_DENIED });
    // Its own name it may claim; alice's record stays alice's.
    const own = await store.claim("mallory", "{}", { lost: () => undefined });
    await own.update("{}");
    expect(alice.member("alice")?.urls).toEqual(alice.urls);
  });

  it("drops a member whose requests are not the registry's protocol, and serves the others", async () => {
    const alice = await member("alice");
    const junk = await context("junk", { secret });
    const pipe = await junk.connect(registry.url);
    await pipe.write({ metadata: "{not json" });
    const err = (await pipe.closed) as TensorPipeError;
    expect(err.code).toBe(ErrorCode.PEER_CLOSED);
    // A request with a payload is refused on its descriptor: the payload is never read, and no view is sent.
    const heavy = await junk.connect(registry.url);
    await heavy.write({ metadata: JSON.stringify({ t: "follow" }), payloads: [{ data: new Uint8Array(1 << 20) }] });
    await expect(heavy.readMessage()).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
    const big = await junk.connect(registry.url);
    await big.write({ metadata: JSON.stringify({ t: "claim", id: 1, name: "junk", value: "x".repeat(100_000) }) });
    expect((await big.closed).code).toBe(ErrorCode.PEER_CLOSED);
    const bob = await member("bob");
    await bob.waitFor("alice", { timeout: 5000 });
    await alice.waitFor("bob", { timeout: 5000 });
  });
});

const missing = etcdMissing();

describe.skipIf(missing !== undefined)("records written straight into etcd", () => {
  let etcd: EtcdCluster;
  beforeAll(async () => {
    etcd = await EtcdCluster.start(1);
  });
  afterAll(() => etcd?.stop());

  it("reports each bad record and ignores it: garbled, oversized, naming another key, with a URL that is not one; the member goes on", async () => {
    const prefix = "/hostile/";
    const c = await context("alice");
    const alice = await join(c, { listen: "uv://127.0.0.1:0", store: etcdStore({ hosts: etcd.hosts, prefix, ttl: 2 }) });
    cleanups.push(() => alice.leave());
    const invalid: TensorPipeError[] = [];
    alice.on("invalidRecord", (e) => invalid.push(e));
    const good = alice.member("alice")!;
    const admin = new Etcd3({ hosts: etcd.hosts }).namespace(prefix);
    cleanups.push(() => admin.delete().all());
    await admin.put("garbled").value("\u0000\u0001 not json");
    await admin.put("huge").value(JSON.stringify({ ...good, name: "huge", data: { x: "y".repeat(1 << 20) } }));
    await admin.put("other").value(JSON.stringify({ ...good, name: "alice" }));
    await admin.put("badurl").value(JSON.stringify({ ...good, name: "badurl", urls: ["javascript:alert(1)"] }));
    const proto = JSON.stringify({ ...good, name: "proto", data: { ["__proto__"]: "x" }, offers: { transports: ["uv\n"], channels: [] } });
    await admin.put("proto").value(proto);
    await expect.poll(() => invalid.length, { timeout: 5000 }).toBe(5);
    expect(invalid.map((e) => e.code)).toEqual(Array(5).fill(ErrorCode.PROTOCOL));
    expect(invalid.map((e) => e.message).join("\n")).toMatch(/not JSON[\s\S]*over 16384[\s\S]*names another member[\s\S]*urls[\s\S]*offers/);
    expect(alice.members().map((m) => m.name)).toEqual(["alice"]);
    // A good record still comes through.
    await admin.put("bob").value(JSON.stringify({ ...good, name: "bob" }));
    await alice.waitFor("bob", { timeout: 5000 });
    // And a record listing alice's own URL as bob's is found out when dialled.
    await expect(alice.pipe("bob")).rejects.toMatchObject({ code: ErrorCode.WRONG_PEER });
  });
});
