/**
 * Context.warmUp(): the hot path run over pipes to the context itself,
 * once for each transport and CPU channel, before the first real message.
 * A pair warm in this thread is not run again, so each test registers its
 * backends under names of its own.
 */
import { BasicChannelContext } from "@tensorpipe/channel-basic";
import { CmaChannelContext } from "@tensorpipe/channel-cma";
import { CPU_DEVICE, Context, type ContextOptions, ErrorCode, type Listener, type Pipe, type TensorPipeError } from "@tensorpipe/core";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { afterEach, describe, expect, it } from "vitest";
import { registerUnrunnable } from "./contexts.js";

const contexts: Context[] = [];
afterEach(async () => {
  for (const c of contexts.splice(0)) await c.close();
});

let names = 0;
/** A context with uv, shm and basic under fresh names (or those of `like`); the names, by kind. */
function fresh(options?: ContextOptions, like?: number): { context: Context; uv: string; shm: string; basic: string; n: number } {
  const n = like ?? ++names;
  const context = new Context(options);
  contexts.push(context);
  const uv = `uv-${n}`;
  const shm = `shm-${n}`;
  const basic = `basic-${n}`;
  context.registerTransport(1, uv, new UvTransport());
  context.registerTransport(10, shm, new ShmTransport());
  context.registerChannel(0, basic, new BasicChannelContext());
  return { context, uv, shm, basic, n };
}

/** The methods warmUp()'s pipes run that a test watches. */
function pick(p: Pick<Pipe, "loan" | "write" | "readDescriptor" | "readMessage">) {
  return { loan: p.loan, write: p.write, readDescriptor: p.readDescriptor, readMessage: p.readMessage };
}

describe("Context.warmUp()", () => {
  it("runs each transport with each CPU channel, says why not for the rest, and leaves no pipe open", async () => {
    const { context, uv, shm, basic } = fresh();
    registerUnrunnable(context, "nowhere", "it needs a device this machine lacks");
    const report = await context.warmUp({ roundTrips: 40 });
    expect(report.warmed.sort()).toEqual([`${shm}+${basic}`, `${uv}+${basic}`].sort());
    expect(report.skipped).toEqual({
      [`${shm}+nowhere`]: "not viable here: it needs a device this machine lacks",
      [`${uv}+nowhere`]: "not viable here: it needs a device this machine lacks",
    });
    expect(report.alreadyWarm).toEqual([]);
    expect(report.roundTrips).toBe(40);
    expect(Number.isInteger(report.ms) && report.ms > 0).toBe(true);
    // Three pipes a pair, each with its two ends; all closed.
    const stats = context.stats();
    expect(stats.pipesOpened).toBe(12);
    expect(stats.pipesOpen).toBe(0);

    // The context serves as before.
    const server = fresh();
    const listener = await server.context.listen(`${server.uv}://127.0.0.1:0`);
    const client = new Context();
    contexts.push(client);
    client.registerTransport(1, server.uv, new UvTransport());
    client.registerChannel(0, server.basic, new BasicChannelContext());
    const accepted = listener.accept();
    const pipe = await client.connect(listener.url(server.uv));
    const far = await accepted;
    await pipe.write({ metadata: "after", tensors: [{ buffer: new Float32Array([1, 2]), targetDevice: CPU_DEVICE }] });
    using got = await far.readMessage();
    expect(got.metadata).toBe("after");
  });

  it("runs only the pairs asked for, and says which it has when one is not", async () => {
    const { context, uv, shm, basic } = fresh();
    const report = await context.warmUp({ roundTrips: 10, pairs: [`${shm}+${basic}`] });
    expect(report.warmed).toEqual([`${shm}+${basic}`]);
    expect(report.alreadyWarm).toEqual([]);
    expect(report.skipped).toEqual({});
    expect(context.stats().pipesOpened).toBe(6);
    for (const pairs of [[`nowhere+${basic}`], [], `${uv}+${basic}`, [7]]) {
      const err = (await context.warmUp({ pairs: pairs as string[] }).catch((e: unknown) => e)) as TensorPipeError;
      expect(err.code).toBe(ErrorCode.INVALID_ARG);
      expect(err.message).toMatch(/^WarmUpOptions\.pairs must be/);
    }
    const unknown = (await context.warmUp({ pairs: [`nowhere+${basic}`] }).catch((e: unknown) => e)) as TensorPipeError;
    expect(unknown.message).toContain(`${uv}+${basic}, ${shm}+${basic}`);
  });

  it("spends its default round trips on the pairs it runs: all of them on one", async () => {
    const { context, shm, basic } = fresh();
    const report = await context.warmUp({ pairs: [`${shm}+${basic}`] });
    expect(report.warmed).toEqual([`${shm}+${basic}`]);
    expect(report.roundTrips).toBe(8000);
  });

  it("does not run a pair again in the same thread", async () => {
    const { context, uv, shm, basic } = fresh();
    await context.warmUp({ roundTrips: 10 });
    const opened = context.stats().pipesOpened;
    const again = await context.warmUp({ roundTrips: 10 });
    expect(again.warmed).toEqual([]);
    expect(again.alreadyWarm.sort()).toEqual([`${shm}+${basic}`, `${uv}+${basic}`].sort());
    expect(context.stats().pipesOpened).toBe(opened);
  });

  it("runs a pair once when called twice at once, the second call waiting for the first", async () => {
    const { context, uv, shm, basic } = fresh();
    const [a, b] = await Promise.all([context.warmUp({ roundTrips: 10 }), context.warmUp({ roundTrips: 10 })]);
    const pairs = [`${shm}+${basic}`, `${uv}+${basic}`].sort();
    expect([...a.warmed, ...b.warmed].sort()).toEqual(pairs);
    expect([...a.alreadyWarm, ...b.alreadyWarm].sort()).toEqual(pairs);
    expect(context.stats().pipesOpened).toBe(12);
  });

  it("closes strangers' pipes to its listener, one that speaks and many that say nothing, side by side, and goes on", async () => {
    const { context, uv, basic } = fresh();
    const stranger = new Context();
    contexts.push(stranger);
    stranger.registerTransport(1, uv, new UvTransport());
    stranger.registerChannel(0, basic, new BasicChannelContext());
    const strangers: Pipe[] = [];
    const listen = context.listen.bind(context);
    // The strangers connect as soon as the listener is up, before warm-up's own pipe.
    context.listen = async (...args: Parameters<Context["listen"]>): Promise<Listener> => {
      const listener = await listen(...args);
      if (!String(args[0]).startsWith(`${uv}://`)) return listener;
      const url = listener.url(uv);
      const talker = await stranger.connect(url);
      await talker.write({ metadata: "let me in" });
      strangers.push(talker, ...(await Promise.all(Array.from({ length: 12 }, () => stranger.connect(url)))));
      return listener;
    };
    const warnings: Error[] = [];
    const warned = (w: Error) => warnings.push(w);
    process.on("warning", warned);
    const report = await context.warmUp({ roundTrips: 10 }).finally(() => process.off("warning", warned));
    expect(report.warmed).toContain(`${uv}+${basic}`);
    // Asked one after another, the twelve silent ones would take a second each.
    expect(report.ms).toBeLessThan(4000);
    // None is left waiting once it is over, and none warned of a listener leak on its signal.
    expect(context.stats().pipesOpen).toBe(0);
    expect(warnings.map((w) => w.name)).not.toContain("MaxListenersExceededWarning");
    expect(strangers).toHaveLength(13);
    for (const s of strangers) {
      const err = (await s.readDescriptor().catch((e: unknown) => e)) as TensorPipeError;
      expect(err.code).toBe(ErrorCode.PEER_CLOSED);
    }
  });

  it("stops when its context closes while it waits for another context's run of the same pairs", async () => {
    const running = fresh();
    const waiting = fresh(undefined, running.n);
    const first = running.context.warmUp({ roundTrips: 1_000_000 });
    first.catch(() => undefined);
    await new Promise((r) => setTimeout(r, 100));
    const second = waiting.context.warmUp();
    second.catch(() => undefined);
    await new Promise((r) => setTimeout(r, 50));
    const started = performance.now();
    await waiting.context.close();
    const err = (await second.catch((e: unknown) => e)) as TensorPipeError;
    expect(err.code).toBe(ErrorCode.CLOSED);
    expect(performance.now() - started).toBeLessThan(500);
    await running.context.close();
    expect(((await first.catch((e: unknown) => e)) as TensorPipeError).code).toBe(ErrorCode.CLOSED);
  });

  it("writes from loans of a sharing channel's pool, and with many messages in flight, as a front does", async () => {
    const { context, shm } = fresh();
    const cma = `cma-${names}`;
    context.registerChannel(5, cma, new CmaChannelContext());
    // Pipe's class, from a pipe of the test's own: warmUp()'s pipes are of it too.
    const listener = await context.listen(`${shm}://`);
    const accepted = listener.accept();
    const own = await context.connect(listener.url(shm));
    (await accepted).close();
    own.close();
    const pipeClass = Object.getPrototypeOf(own) as Pick<Pipe, "loan" | "write" | "readDescriptor" | "readMessage">;
    const real = { ...pick(pipeClass) };
    const lent: number[] = [];
    // Per pipe, messages written whose answers it has not begun to read.
    const ahead = new WeakMap<Pipe, number>();
    let mostAhead = 0;
    const step = (pipe: Pipe, n: number) => {
      const now = (ahead.get(pipe) ?? 0) + n;
      ahead.set(pipe, now);
      mostAhead = Math.max(mostAhead, now);
    };
    pipeClass.loan = async function (this: Pipe, length, options) {
      const view = await real.loan.call(this, length, options);
      lent.push(view.byteLength);
      return view;
    };
    pipeClass.write = function (this: Pipe, message, options) {
      step(this, 1);
      return real.write.call(this, message, options);
    };
    pipeClass.readDescriptor = function (this: Pipe, options) {
      step(this, -1);
      return real.readDescriptor.call(this, options);
    };
    pipeClass.readMessage = function (this: Pipe, options) {
      step(this, -1);
      return real.readMessage.call(this, options);
    };
    try {
      await context.warmUp({ roundTrips: 200 });
    } finally {
      Object.assign(pipeClass, real);
    }
    // Past 64 KiB a cma pipe lends from its pool.
    expect(lent.filter((n) => n > 64 * 1024).length).toBeGreaterThan(0);
    expect(mostAhead).toBeGreaterThanOrEqual(16);
    expect(context.stats().channels[cma]!.tensorsSent).toBeGreaterThan(0);
  });

  it("keeps its messages within the context's maxMessageBytes", async () => {
    const { context, uv, shm, basic } = fresh({ maxMessageBytes: 1024 });
    const report = await context.warmUp({ roundTrips: 20 });
    expect(report.skipped).toEqual({});
    expect(report.warmed.sort()).toEqual([`${shm}+${basic}`, `${uv}+${basic}`].sort());
  });

  it("says what to do when there is nothing to warm", async () => {
    const context = new Context();
    contexts.push(context);
    const err = (await context.warmUp().catch((e: unknown) => e)) as TensorPipeError;
    expect(err.code).toBe(ErrorCode.INVALID_ARG);
    expect(err.message).toMatch(/register.*transport.*channel/);
  });

  it("fails with the reason it was stopped mid-run, and leaves nothing failing after", async () => {
    const stopped: TensorPipeError[] = [];
    const late = fresh();
    stopped.push((await late.context.warmUp({ roundTrips: 1_000_000, timeout: 150 }).catch((e: unknown) => e)) as TensorPipeError);
    const aborted = fresh();
    const controller = new AbortController();
    setTimeout(() => controller.abort(new Error("stop")), 150);
    stopped.push((await aborted.context.warmUp({ roundTrips: 1_000_000, signal: controller.signal }).catch((e: unknown) => e)) as TensorPipeError);
    const closed = fresh();
    setTimeout(() => void closed.context.close(), 150);
    stopped.push((await closed.context.warmUp({ roundTrips: 1_000_000 }).catch((e: unknown) => e)) as TensorPipeError);
    expect(stopped.map((e) => e.code)).toEqual([ErrorCode.TIMEOUT, ErrorCode.ABORTED, ErrorCode.CLOSED]);
    // What was under way fails after; vitest fails the file on an unhandled rejection.
    await new Promise((r) => setTimeout(r, 300));
    expect(late.context.stats().pipesOpen + aborted.context.stats().pipesOpen).toBe(0);
  });

  it("names itself, not the dial inside it, when stopped while it opens a pipe", async () => {
    const { context } = fresh();
    const controller = new AbortController();
    const connect = context.connect.bind(context);
    // Stopped just as warmUp() dials its own listener.
    Object.assign(context, {
      connect: (...args: Parameters<Context["connect"]>) => {
        controller.abort(new Error("enough"));
        return connect(...args);
      },
    });
    const err = (await context.warmUp({ signal: controller.signal }).catch((e: unknown) => e)) as TensorPipeError;
    expect(err.code).toBe(ErrorCode.ABORTED);
    expect(err.message).toBe("warm-up was aborted: enough");
    expect(context.stats().pipesOpen).toBe(0);
  });

  it("stops where it is on its signal or timeout, and takes only whole round trips", async () => {
    const { context } = fresh();
    const aborted = (await context.warmUp({ signal: AbortSignal.abort() }).catch((e: unknown) => e)) as TensorPipeError;
    expect(aborted.code).toBe(ErrorCode.ABORTED);
    const late = (await context.warmUp({ timeout: 1 }).catch((e: unknown) => e)) as TensorPipeError;
    expect(late.code).toBe(ErrorCode.TIMEOUT);
    expect(context.stats().pipesOpen).toBe(0);
    const notAnObject = (await context.warmUp([] as never).catch((e: unknown) => e)) as TensorPipeError;
    expect(notAnObject.code).toBe(ErrorCode.INVALID_ARG);
    for (const roundTrips of [0, 1.5, "10"]) {
      const err = (await context.warmUp({ roundTrips: roundTrips as number }).catch((e: unknown) => e)) as TensorPipeError;
      expect(err.code).toBe(ErrorCode.INVALID_ARG);
      expect(err.message).toMatch(/roundTrips/);
    }
  });
});
