/**
 * Context.warmUp(): the hot path run over pipes to itself before the first
 * real message, so that V8 has compiled it. A fresh process otherwise
 * interprets it for its first few thousand messages while its compiler
 * threads take the CPU from it: on 2 cores, 2-6x the warm p50 for 8 B
 * messages (docs/performance.md, "Cold start").
 *
 * V8's code is per thread, not per context: a pair warmed once in a
 * thread is not warmed again.
 */
import { randomBytes } from "node:crypto";
import { abortError, raceSignal } from "./abort.js";
import { Deferred } from "./deferred.js";
import { CPU_DEVICE } from "./device.js";
import type { Listener } from "./listener.js";
import type { Allocation, Message } from "./message.js";
import { allocateMessage } from "./message-memory.js";
import type { Pipe } from "./pipe/pipe.js";

/** What Context.warmUp() did. */
export interface WarmUpReport {
  /** The transport+channel pairs it ran now ("shm+cma"), each `roundTrips` times. */
  warmed: string[];
  /** Pairs it did not run because a call before had, in this thread. */
  alreadyWarm: string[];
  /** Pairs it could not run, each with why ("uv+cuda-ipc": "carries no CPU tensors"). */
  skipped: Record<string, string>;
  /** Round trips over each pair in `warmed`. */
  roundTrips: number;
  /** Wall time it took, in whole ms. */
  ms: number;
}

/** A backend warmUp() may run: its registered name, and why not when it cannot. */
export interface WarmCandidate {
  name: string;
  /** Why it cannot be warmed here (not viable, no loopback address, no CPU tensors). */
  skip?: string | undefined;
  /** A transport's address to listen on and reach this process at. */
  loopbackAddress?: string | undefined;
}

/** What warmUp() needs of a context. */
export interface WarmUpHost {
  listen(url: string): Promise<Listener>;
  connect(url: string, options: { path: { transports: string[]; channels: string[] }; signal: AbortSignal }): Promise<Pipe>;
}

/** How a report, this thread's records and WarmUpOptions.pairs name a pair: "shm+cma". */
export function pairName(transport: string, channel: string): string {
  return `${transport}+${channel}`;
}

/** Pairs warmed in this thread. */
const warmedHere = new Set<string>();
/** Pairs a call is warming now in this thread: settles when it is over, however it ends. */
const warmingHere = new Map<string, Promise<void>>();

/**
 * Round trips a warm-up runs by default: shared among the pairs it runs,
 * at least MIN_ROUND_TRIPS each. What compiles a pair's code is the round
 * trips through it: a process warmed over its one pair with 8,000 starts
 * its first thousand 8 B round trips over uv at 1.1-1.2x the warm p50 and
 * 2.2-2.8x its p99, against 1.8-2.0x and 11-19x with 2,000
 * (docs/performance.md, "Cold start").
 */
const DEFAULT_ROUND_TRIPS = 8000;
const MIN_ROUND_TRIPS = 2000;

/**
 * Runs `roundTrips` round trips (by default DEFAULT_ROUND_TRIPS shared
 * among them) over a pipe to itself for each transport with a loopback
 * address and each channel that carries CPU tensors (of those, only the
 * pairs in `pairs` when given).
 */
export async function warmUp(
  host: WarmUpHost,
  transports: readonly WarmCandidate[],
  candidates: readonly WarmCandidate[],
  options: { roundTrips?: number | undefined; maxMessageBytes: number; pairs?: ReadonlySet<string> | undefined },
  signal: AbortSignal,
): Promise<WarmUpReport> {
  const { maxMessageBytes, pairs } = options;
  const started = performance.now();
  const asked = (t: string, c: string) => pairs === undefined || pairs.has(pairName(t, c));
  const skipped: Record<string, string> = {};
  const channels: string[] = [];
  for (const c of candidates) {
    if (c.skip === undefined) channels.push(c.name);
    else for (const t of transports) if (asked(t.name, c.name)) skipped[pairName(t.name, c.name)] = c.skip;
  }
  // What runs: each transport that can, with its channels asked for.
  const plan: { transport: string; address: string; channels: string[] }[] = [];
  for (const t of transports) {
    const address = t.loopbackAddress;
    const mine = channels.filter((c) => asked(t.name, c));
    if (t.skip !== undefined || address === undefined) {
      const why = t.skip ?? `transport "${t.name}" names no loopback address`;
      for (const c of mine) skipped[pairName(t.name, c)] = why;
    } else if (mine.length > 0) {
      plan.push({ transport: t.name, address, channels: mine });
    }
  }
  const pairsToRun = plan.reduce((n, p) => n + p.channels.length, 0);
  const roundTrips = options.roundTrips ?? Math.max(MIN_ROUND_TRIPS, Math.ceil(DEFAULT_ROUND_TRIPS / Math.max(1, pairsToRun)));
  const shape = { roundTrips, sizes: sizesWithin(maxMessageBytes) };
  const report: WarmUpReport = { warmed: [], alreadyWarm: [], skipped, roundTrips, ms: 0 };
  for (const p of plan) await warmTransport(host, p.transport, p.address, p.channels, shape, signal, report);
  report.ms = Math.round(performance.now() - started);
  return report;
}

/**
 * Runs each of `channels` over `transport` not warm in this thread yet,
 * listening on its loopback address meanwhile.
 */
async function warmTransport(
  host: WarmUpHost,
  transport: string,
  address: string,
  channels: readonly string[],
  shape: Shape,
  signal: AbortSignal,
  report: WarmUpReport,
): Promise<void> {
  // Pairs another call is warming now: this one waits for them rather than run them again.
  for (;;) {
    const other = channels.map((c) => warmingHere.get(pairName(transport, c))).find((p) => p !== undefined);
    if (!other) break;
    await raceSignal(other, signal, "warm-up");
  }
  const todo = channels.filter((c) => !warmedHere.has(pairName(transport, c)));
  for (const c of channels) if (!todo.includes(c)) report.alreadyWarm.push(pairName(transport, c));
  if (todo.length === 0) return;
  // Marked before the first await, so that a call made meanwhile waits for these.
  const over = new Deferred<void>();
  for (const c of todo) warmingHere.set(pairName(transport, c), over.promise);
  try {
    const listening = host.listen(`${transport}://${address}`);
    const listener = await raceSignal(
      listening,
      signal,
      "warm-up",
      () =>
        void listening.then(
          (l) => l.close(),
          () => undefined,
        ),
    );
    try {
      const url = listener.url(transport);
      for (const c of todo) {
        const pair = pairName(transport, c);
        const failed = await warmPair(host, url, transport, c, listener, shape, signal);
        if (failed !== undefined) {
          report.skipped[pair] = failed;
          continue;
        }
        warmedHere.add(pair);
        report.warmed.push(pair);
      }
    } finally {
      listener.close();
    }
  } finally {
    for (const c of todo) warmingHere.delete(pairName(transport, c));
    over.resolve();
  }
}

/**
 * Half the round trips over one pipe, then a quarter over each of two
 * more: a new pipe's handshake runs code the messages share (devices,
 * options, timers) down paths the compiled code had not seen, and V8
 * throws that code away; on the next pipes it compiles it again knowing
 * them, so that the application's first pipe finds it ready. Undefined
 * when done, else why the pair could not be run.
 */
async function warmPair(
  host: WarmUpHost,
  url: string,
  transport: string,
  channel: string,
  listener: Listener,
  shape: Shape,
  signal: AbortSignal,
): Promise<string | undefined> {
  const path = { transports: [transport], channels: [channel] };
  for (const share of [0.5, 0.25, 0.25]) {
    let pipes: [Pipe, Pipe];
    try {
      pipes = await openSelfPipe(host, url, path, listener, signal);
    } catch (e) {
      // Named as the caller's operation: the dial inside is not one they made.
      if (signal.aborted) throw abortError(signal, "warm-up");
      return (e as Error).message;
    }
    // Its pipes are closed below if the signal stops it first: it then fails, and nobody waits for it.
    const run = exercise(pipes[0], pipes[1], Math.ceil(shape.roundTrips * share), shape.sizes);
    run.catch(() => undefined);
    try {
      await raceSignal(run, signal, "warm-up");
    } catch (e) {
      if (signal.aborted) throw abortError(signal, "warm-up");
      return (e as Error).message;
    } finally {
      pipes[0].close();
      pipes[1].close();
    }
  }
  return undefined;
}

/** How long a pipe accepted while warming up may take to say it is ours. */
const PROVE_WITHIN_MS = 1000;

/**
 * A pipe to this process and its other end. While it listens, anyone on
 * this machine may connect too: the end taken is the one whose first
 * message is a nonce only this call knows. Every pipe accepted meanwhile
 * is asked at once, side by side, so that strangers that say nothing
 * delay it by a second at most, however many; each is closed once it has
 * said something else, or nothing within that second, or once ours is
 * found.
 */
async function openSelfPipe(
  host: WarmUpHost,
  url: string,
  path: { transports: string[]; channels: string[] },
  listener: Listener,
  signal: AbortSignal,
): Promise<[Pipe, Pipe]> {
  const nonce = `warm-up ${randomBytes(16).toString("hex")}`;
  const near = await host.connect(url, { path, signal });
  const ours = new Deferred<Pipe>();
  // Stops the accepting below once ours is found (or the caller's signal fires).
  const found = new AbortController();
  const stop = () => found.abort();
  signal.addEventListener("abort", stop, { once: true });
  // Pipes accepted and not yet found ours or not: closed once ours is found.
  const asked = new Set<Pipe>();
  const prove = (far: Pipe) => {
    asked.add(far);
    far.readDescriptor({ signal, timeout: PROVE_WITHIN_MS }).then(
      (d) => {
        asked.delete(far);
        if (d.metadata === nonce && d.payloads.length === 0 && d.tensors.length === 0) ours.resolve(far);
        else far.close();
      },
      () => {
        asked.delete(far);
        far.close();
      },
    );
  };
  const accepting = (async () => {
    for (;;) prove(await listener.accept({ signal: found.signal }));
  })();
  // Accepting fails on its own only if the listener does (the context closing).
  accepting.catch((e: unknown) => {
    if (!found.signal.aborted) ours.reject(e);
  });
  let far: Pipe | undefined;
  try {
    await near.write({ metadata: nonce });
    far = await raceSignal(ours.promise, signal, "warm-up");
    await far.read({ payloads: [], tensors: [] });
    return [near, far];
  } catch (e) {
    near.close();
    far?.close();
    throw e;
  } finally {
    stop();
    signal.removeEventListener("abort", stop);
    for (const stranger of asked) stranger.close();
  }
}

/**
 * What warm-up messages are made of, varied as applications' are. V8
 * optimizes for what it has seen: code that saw only 8 B Float32Arrays in
 * `{ buffer }` objects is thrown away at the application's first
 * Uint8Array, first length over 255, first `{ buffer, metadata }`, first
 * operation with a timeout; and compiled again only once it is hot again,
 * thousands of messages later. Past four shapes at one place V8 stops
 * specializing it, so five shapes of message and of tensor objects and
 * five array types: an application's own then find code that takes any.
 */
type Parts = { payloads: { data: ArrayBufferView }[]; tensors: { buffer: ArrayBufferView }[] };
const SIZES = [8, 4, 300, 8, 70_000];
/** Bytes of the payload some warm-up messages carry besides their tensor. */
const PAYLOAD_BYTES = 16;

/** How many round trips, and the tensor sizes to send: SIZES, each cut to what a peer's message may be here. */
interface Shape {
  roundTrips: number;
  sizes: number[];
}

/** SIZES cut to fit ContextOptions.maxMessageBytes with a payload, in whole 8 bytes (at least 8). */
function sizesWithin(maxMessageBytes: number): number[] {
  return SIZES.map((n) => Math.max(8, Math.floor(Math.min(n, maxMessageBytes - PAYLOAD_BYTES) / 8) * 8));
}
const VIEWS = [
  (n: number) => new Float32Array(Math.ceil(n / 4)),
  (n: number) => new Uint8Array(n),
  (n: number) => Buffer.alloc(n),
  (n: number) => new Float64Array(Math.ceil(n / 8)),
  (n: number) => new Int32Array(Math.ceil(n / 4)),
];
const TENSORS = [
  (buffer: ArrayBufferView) => ({ buffer }),
  (buffer: ArrayBufferView) => ({ buffer, targetDevice: CPU_DEVICE }),
  (buffer: ArrayBufferView) => ({ buffer, metadata: "t" }),
  (buffer: ArrayBufferView) => ({ metadata: "", buffer, targetDevice: CPU_DEVICE }),
  (buffer: ArrayBufferView) => ({ targetDevice: CPU_DEVICE, buffer }),
];
const PAYLOADS = [
  (data: ArrayBufferView) => ({ data }),
  (data: ArrayBufferView) => ({ data, metadata: "p" }),
  (data: ArrayBufferView) => ({ metadata: "", data }),
];
const MESSAGES = [
  (_p: Message["payloads"], t: Message["tensors"]): Message => ({ tensors: t }),
  (p: Message["payloads"], t: Message["tensors"]): Message => ({ metadata: "warm-up", payloads: p, tensors: t }),
  (p: Message["payloads"], t: Message["tensors"]): Message => ({ payloads: p, tensors: t }),
  (_p: Message["payloads"], t: Message["tensors"]): Message => ({ tensors: t, metadata: "m" }),
  (p: Message["payloads"], t: Message["tensors"]): Message => ({ metadata: "", tensors: t, payloads: p }),
];
const ALLOCATIONS = [
  (p: Allocation["payloads"], t: Allocation["tensors"]): Allocation => ({ payloads: p, tensors: t }),
  (p: Allocation["payloads"], t: Allocation["tensors"]): Allocation => ({ tensors: t, payloads: p }),
];
const OPTIONS = [undefined, { timeout: 60_000 }, undefined, { signal: new AbortController().signal }, undefined];

/** The i-th of `list`, for the i-th round trip: lists of co-prime lengths meet in every combination. */
function nth<T>(list: readonly T[], i: number): T {
  return list[i % list.length]!;
}

/**
 * Whether round trip `i` writes from loans (Pipe.loan()), both ways: one in
 * four, of the largest size, which a channel that shares memory lends
 * from its pool (past 64 KiB with cma), so that a front writing loans and
 * a worker reading them in place find that path compiled too.
 */
function lends(i: number): boolean {
  return i % 4 === 3;
}

/**
 * One group of round trips in BURST_EVERY is BURST messages written
 * before their answers are read, as a front with requests in flight
 * writes: writes that wait, queues that grow and turns the budget cuts
 * short run code that one message at a time never does, and V8 throws
 * away the optimized code around such a path the first time it runs.
 */
const BURST = 16;
const BURST_EVERY = 16;

/**
 * Round trips in the shapes above, each echoed by `far`: read through
 * readDescriptor() and read() into memory made for it, or through
 * readMessage(); written back as it came, or from a loan of its own.
 */
async function exercise(near: Pipe, far: Pipe, roundTrips: number, sizes: readonly number[]): Promise<void> {
  const echo = (async (): Promise<void> => {
    for (let i = 0; i < roundTrips; i++) {
      const options = nth(OPTIONS, i);
      if (i % 2 === 0) {
        const d = await far.readDescriptor(options);
        const got = allocateMessage(d);
        await far.read(
          nth(ALLOCATIONS, i)(
            got.payloads,
            got.tensors.map((t) => nth(TENSORS, i)(t.buffer as ArrayBufferView)),
          ),
          options,
        );
        const payloads = got.payloads.map((p) => nth(PAYLOADS, i)(p.data));
        await far.write(
          nth(MESSAGES, i + 1)(
            payloads,
            got.tensors.map((t) => nth(TENSORS, i + 1)(t.buffer as ArrayBufferView)),
          ),
          options,
        );
      } else if (lends(i)) {
        const m = await far.readMessage(options);
        const got = m.tensors[0]!.buffer;
        const back = await far.loan(got.byteLength, options);
        back.set(got);
        m.release();
        await far.write(nth(MESSAGES, i)([], [nth(TENSORS, i)(back)]), options);
      } else {
        const m = await far.readMessage(options);
        await far.write(
          nth(MESSAGES, i)(
            [],
            m.tensors.map((t) => nth(TENSORS, i)(t.buffer)),
          ),
          options,
        );
        m.release();
      }
    }
  })();
  // Awaited below, unless the near end fails first.
  echo.catch(() => undefined);
  const parts: Parts[] = sizes.map((n, i) => ({
    payloads: i % 2 === 0 ? [{ data: Buffer.alloc(PAYLOAD_BYTES) }] : [],
    tensors: [{ buffer: VIEWS[i]!(n) }],
  }));
  const loanBytes = Math.max(...sizes);
  const messageFor = async (i: number): Promise<Message> => {
    const { payloads, tensors } = nth(parts, i >> 1);
    return lends(i)
      ? nth(MESSAGES, i)([], [nth(TENSORS, i)(await near.loan(loanBytes, nth(OPTIONS, i)))])
      : nth(MESSAGES, i)(
          i % 2 === 0 ? payloads.map((p) => nth(PAYLOADS, i)(p.data)) : [],
          tensors.map((t) => nth(TENSORS, i)(t.buffer)),
        );
  };
  const readAnswer = async (i: number): Promise<void> => {
    const options = nth(OPTIONS, i);
    if (i % 2 === 0) {
      const d = await near.readDescriptor(options);
      const back = allocateMessage(d);
      await near.read(
        nth(ALLOCATIONS, i >> 1)(
          back.payloads,
          back.tensors.map((t) => nth(TENSORS, i >> 1)(t.buffer as ArrayBufferView)),
        ),
        options,
      );
    } else {
      (await near.readMessage(options)).release();
    }
  };
  for (let i = 0, group = 0; i < roundTrips; group++) {
    const n = Math.min(group % BURST_EVERY === BURST_EVERY - 1 ? BURST : 1, roundTrips - i);
    const writes: Promise<void>[] = [];
    for (let k = i; k < i + n; k++) writes.push(near.write(await messageFor(k), nth(OPTIONS, k)));
    const written = Promise.all(writes);
    // Awaited below, unless an answer fails first.
    written.catch(() => undefined);
    for (let k = i; k < i + n; k++) await readAnswer(k);
    await written;
    i += n;
  }
  await echo;
}
