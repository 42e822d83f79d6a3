/**
 * The conformance suite of a ClusterStore, for vitest: what a member needs
 * of any store (etcd, the embedded registry, or a third party's), played
 * through real members with real pipes. `@tensorpipe/cluster/testing`.
 */
import { type Context, ErrorCode, type Pipe } from "@tensorpipe/core";
import { afterEach, describe, expect, it } from "vitest";
import { type Member, join } from "./member.js";
import type { MembershipChange } from "./membership.js";
import type { ClusterStore } from "./store.js";

/** What the suite needs to run members on a store. */
export interface StoreConformanceOptions {
  /** The suite's title: the store's name. */
  name: string;
  /** A context named `name` with the transports and channels members use (the suite closes it). */
  context(name: string): Promise<Context>;
  /** Where members listen, e.g. "uv://127.0.0.1:0". */
  listen: string;
  /** A new store object for a member whose context is `context`, on the same backing service each time. */
  store(context: Context): ClusterStore;
  /**
   * Where given, makes the backing service unreachable and resolves with
   * the function that brings it back: the outage tests run.
   */
  outage?: () => Promise<() => Promise<void>>;
  /** Milliseconds within which the store shows a change to every member. Default 5000. */
  settle?: number;
}

/** Runs the conformance suite of a ClusterStore. */
export function describeStoreConformance(options: StoreConformanceOptions): void {
  const settle = options.settle ?? 5_000;
  describe(`cluster store conformance: ${options.name}`, () => {
    const cleanups: (() => Promise<unknown> | unknown)[] = [];
    afterEach(async () => {
      for (const c of cleanups.splice(0).reverse()) await c();
    });
    const context = async (name: string) => {
      const c = await options.context(name);
      cleanups.push(() => c.close());
      return c;
    };
    const member = async (name: string, data?: Record<string, string>): Promise<Member> => {
      const c = await context(name);
      const m = await join(c, { listen: options.listen, store: options.store(c), data });
      cleanups.push(() => m.leave());
      return m;
    };
    /** The next change that `match` accepts, within the settle time. */
    const nextChange = async (changes: AsyncIterator<MembershipChange>, match: (c: MembershipChange) => boolean): Promise<MembershipChange> => {
      const deadline = Date.now() + settle;
      for (;;) {
        const left = deadline - Date.now();
        const next = await Promise.race([changes.next(), new Promise<"late">((r) => setTimeout(() => r("late"), Math.max(0, left)))]);
        if (next === "late") throw new Error(`no matching change within ${settle} ms`);
        if (next.done) throw new Error("changes() ended");
        if (match(next.value)) return next.value;
      }
    };
    const echo = async (m: Member) => {
      for await (const p of m.accepted()) {
        void (async () => {
          for await (const msg of p) await p.write({ metadata: `${m.name}:${msg.metadata}` }).catch(() => undefined);
        })().catch(() => undefined);
      }
    };
    const roundTrip = async (pipe: Pipe, text: string) => {
      await pipe.write({ metadata: text });
      return (await pipe.readMessage({ timeout: settle })).metadata;
    };

    it("members see each other, with their records, and open pipes by name both ways", async () => {
      const a = await member("alpha", { role: "front" });
      const b = await member("beta", { role: "worker" });
      await a.waitFor("beta", { timeout: settle });
      await b.waitFor("alpha", { timeout: settle });
      expect(
        a
          .members()
          .map((m) => m.name)
          .sort(),
      ).toEqual(["alpha", "beta"]);
      expect(a.member("beta")).toMatchObject({ name: "beta", urls: b.urls, pid: process.pid, data: { role: "worker" } });
      void echo(a);
      void echo(b);
      expect(await roundTrip(await a.pipe("beta"), "hi")).toBe("beta:hi");
      expect(await roundTrip(await b.pipe("alpha"), "yo")).toBe("alpha:yo");
    });

    it("names the dialler on the pipe it accepted", async () => {
      const a = await member("alpha");
      const b = await member("beta");
      await a.waitFor("beta", { timeout: settle });
      const [, accepted] = await Promise.all([a.pipe("beta"), b.accept({ timeout: settle })]);
      expect(accepted.peerName).toBe("alpha");
    });

    it("refuses a second member under a taken name, and the first stays", async () => {
      const a = await member("alpha");
      const c = await context("alpha");
      await expect(join(c, { listen: options.listen, store: options.store(c), timeout: settle })).rejects.toMatchObject({
        code: ErrorCode.NAME_TAKEN,
        message: expect.stringContaining('"alpha"'),
      });
      const b = await member("beta");
      await b.waitFor("alpha", { timeout: settle });
      expect(b.member("alpha")?.urls).toEqual(a.urls);
    });

    it("shares one dial between concurrent pipe() calls, reuses it, and dials again once it ended", async () => {
      const a = await member("alpha");
      const b = await member("beta");
      void echo(b);
      await a.waitFor("beta", { timeout: settle });
      const [p1, p2, p3] = await Promise.all([a.pipe("beta"), a.pipe("beta"), a.pipe("beta")]);
      expect(p2).toBe(p1);
      expect(p3).toBe(p1);
      expect(await a.pipe("beta")).toBe(p1);
      p1.close();
      const p4 = await a.pipe("beta");
      expect(p4).not.toBe(p1);
      expect(await roundTrip(p4, "again")).toBe("beta:again");
    });

    it("rejects a pipe to a name nobody holds, and waits for one to join when asked", async () => {
      const a = await member("alpha");
      await expect(a.pipe("gamma")).rejects.toMatchObject({ code: ErrorCode.NOT_FOUND, message: expect.stringContaining('waitFor("gamma")') });
      await expect(a.waitFor("gamma", { timeout: 50 })).rejects.toMatchObject({ code: ErrorCode.TIMEOUT });
      const waited = a.waitFor("gamma", { timeout: settle });
      await member("gamma");
      expect((await waited).name).toBe("gamma");
    });

    it("tells joins, updates and leaves in order, a leave at once and as a leave", async () => {
      const a = await member("alpha");
      const changes = a.changes();
      const b = await member("beta");
      expect(await nextChange(changes, (c) => c.member.name === "beta")).toMatchObject({ type: "joined" });
      await b.update({ load: "0.5" });
      expect(await nextChange(changes, (c) => c.member.name === "beta")).toMatchObject({ type: "updated", member: { data: { load: "0.5" } } });
      const started = Date.now();
      await b.leave();
      expect(await nextChange(changes, (c) => c.member.name === "beta")).toMatchObject({ type: "left", reason: "left" });
      expect(Date.now() - started).toBeLessThan(settle);
      expect(a.member("beta")).toBeUndefined();
      await changes.return?.();
    });

    it("refuses an update that does not fit, as it was; a record at the bound still leaves as a leave", async () => {
      const a = await member("alpha");
      const big = await context("beta");
      const b = await join(big, { listen: options.listen, store: options.store(big), data: { pad: "" } });
      cleanups.push(() => b.leave());
      await a.waitFor("beta", { timeout: settle });
      const before = b.member("beta")!;
      await expect(b.update({ pad: "€".repeat(6000) })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG, message: expect.stringContaining("bytes, over") });
      expect(b.member("beta")).toEqual(before);
      // The largest data that fits.
      let pad = 16_000 - JSON.stringify(before).length;
      for (; pad > 0; pad--) {
        try {
          await b.update({ pad: "x".repeat(pad) });
          break;
        } catch {}
      }
      const changes = a.changes();
      await b.leave();
      expect(await nextChange(changes, (c) => c.member.name === "beta" && c.type === "left")).toMatchObject({ reason: "left" });
    });

    it("leaves when the member's context closes", async () => {
      const a = await member("alpha");
      const cb = await context("beta");
      const b = await join(cb, { listen: options.listen, store: options.store(cb) });
      await a.waitFor("beta", { timeout: settle });
      const changes = a.changes();
      await cb.close();
      expect(await nextChange(changes, (c) => c.member.name === "beta")).toMatchObject({ type: "left", reason: "left" });
      expect(b.hasLeft).toBe(true);
      await expect(b.pipe("alpha")).rejects.toMatchObject({ code: ErrorCode.CLOSED });
    });

    it("reports a garbled record and ignores it; a record pointing at another member's URL fails the handshake's name check", async () => {
      const a = await member("alpha");
      const b = await member("beta");
      const invalid: Error[] = [];
      a.on("invalidRecord", (e) => invalid.push(e));
      const garbled = await context("garbled");
      const gs = options.store(garbled);
      cleanups.push(() => gs.close());
      const claimGarbled = await gs.claim("garbled", "{not json", { lost: () => undefined });
      cleanups.push(() => claimGarbled.release());
      await expect.poll(() => invalid.length, { timeout: settle }).toBeGreaterThan(0);
      expect(invalid[0]).toMatchObject({ code: ErrorCode.PROTOCOL, message: expect.stringContaining("not JSON") });
      expect(a.member("garbled")).toBeUndefined();
      // A record that lists beta's URL under another name.
      const liar = await context("liar");
      const ls = options.store(liar);
      cleanups.push(() => ls.close());
      const record = { ...a.member("beta")!, name: "liar" };
      const claimLiar = await ls.claim("liar", JSON.stringify(record), { lost: () => undefined });
      cleanups.push(() => claimLiar.release());
      await a.waitFor("liar", { timeout: settle });
      await expect(a.pipe("liar")).rejects.toMatchObject({ code: ErrorCode.WRONG_PEER, message: expect.stringContaining('answered as "beta"') });
      void b;
    });

    it("checks its arguments with errors that say how to fix them", async () => {
      const c = await context("");
      await expect(join(c, { listen: options.listen, store: options.store(c) })).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
        message: expect.stringContaining("new Context({ name"),
      });
      const d = await context("delta");
      await expect(join(d, { listen: options.listen, store: options.store(d), name: "epsilon" })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      await expect(join(d, { listen: options.listen, store: options.store(d), name: 42 as unknown as string })).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
        message: expect.stringContaining("name must be a string"),
      });
      const a = await member("alpha");
      await expect(a.pipe("alpha")).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      await expect(a.pipe(42 as unknown as string)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      await expect(a.pipe("")).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      await expect(a.waitFor("bad name!", { timeout: 10_000 })).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
        message: expect.stringContaining("not a member's name"),
      });
      await expect(a.update({ n: 1 } as unknown as Record<string, string>)).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
      // One member per context.
      const again = await context("beta");
      const b = await join(again, { listen: options.listen, store: options.store(again) });
      cleanups.push(() => b.leave());
      await expect(join(again, { listen: options.listen, store: options.store(again) })).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
        message: expect.stringContaining('has joined already, as member "beta"'),
      });
      await b.leave();
      await expect(b.accept()).rejects.toMatchObject({ code: ErrorCode.CLOSED, message: expect.stringContaining("has left") });
    });

    it("gives up a join aborted before it started, and leaves nothing behind", async () => {
      const c = await context("alpha");
      const aborted = new AbortController();
      aborted.abort();
      await expect(join(c, { listen: options.listen, store: options.store(c), signal: aborted.signal })).rejects.toMatchObject({ code: ErrorCode.ABORTED });
      const a = await join(c, { listen: options.listen, store: options.store(c) });
      cleanups.push(() => a.leave());
      expect(a.member("alpha")?.name).toBe("alpha");
    });

    it("publishes where others reach it: interface addresses for a wildcard, or what it is told to advertise", async () => {
      const wildcard = options.listen.replace("127.0.0.1", "0.0.0.0");
      const c = await context("alpha");
      const a = await join(c, { listen: wildcard, store: options.store(c) });
      cleanups.push(() => a.leave());
      expect(a.urls.length).toBeGreaterThan(0);
      expect(a.urls.join(" ")).not.toMatch(/0\.0\.0\.0|\[::\]/);
      const d = await context("delta");
      const advertised = ["uv://203.0.113.7:7000"];
      const m = await join(d, { listen: options.listen, store: options.store(d), advertise: advertised });
      cleanups.push(() => m.leave());
      await a.waitFor("delta", { timeout: settle });
      expect(a.member("delta")?.urls).toEqual(advertised);
    });

    it.skipIf(!options.outage)("waits for a store that is not up yet, within the join's timeout", async () => {
      const restore = await options.outage!();
      let restored = false;
      cleanups.push(() => (restored ? undefined : restore()));
      const c = await context("alpha");
      await expect(join(c, { listen: options.listen, store: options.store(c), timeout: 300 })).rejects.toMatchObject({
        code: ErrorCode.UNAVAILABLE,
        message: expect.stringContaining("could not be reached within 300 ms"),
      });
      const joining = join(c, { listen: options.listen, store: options.store(c), timeout: settle * 2 });
      await new Promise((r) => setTimeout(r, 300));
      await restore();
      restored = true;
      const a = await joining;
      cleanups.push(() => a.leave());
      expect(a.member("alpha")?.name).toBe("alpha");
    });

    it.skipIf(!options.outage)("keeps pipes and the last membership while the store is away, and catches up when it is back", async () => {
      const a = await member("alpha");
      const b = await member("beta");
      void echo(b);
      await a.waitFor("beta", { timeout: settle });
      const pipe = await a.pipe("beta");
      const unavailable = new Promise((r) => a.once("unavailable", r));
      const left: string[] = [];
      a.on("change", (c) => {
        if (c.type === "left") left.push(c.member.name);
      });
      const restore = await options.outage!();
      let restored = false;
      cleanups.push(() => (restored ? undefined : restore()));
      await unavailable;
      expect(a.stale?.code).toBe(ErrorCode.UNAVAILABLE);
      expect(
        a
          .members()
          .map((m) => m.name)
          .sort(),
      ).toEqual(["alpha", "beta"]);
      expect(await roundTrip(pipe, "during")).toBe("beta:during");
      const available = new Promise<void>((r) => a.once("available", () => r()));
      await restore();
      restored = true;
      await available;
      expect(a.stale).toBeUndefined();
      // Both are members again, whatever the store kept of them.
      await expect
        .poll(
          () =>
            a
              .members()
              .map((m) => m.name)
              .sort(),
          { timeout: settle * 2 },
        )
        .toEqual(["alpha", "beta"]);
      const c = await member("gamma");
      await a.waitFor("gamma", { timeout: settle });
      await c.waitFor("beta", { timeout: settle });
      expect(await roundTrip(pipe, "after")).toBe("beta:after");
      // Nobody was seen to leave: members that are alive stay members through the store's outage.
      expect(left).toEqual([]);
    });
  });
}
