/**
 * The pipe's state machine against what must hold whatever the order of
 * events: random programs of writes, reads, aborts, timeouts, closes,
 * cuts and deliveries (each delivery on a connection fast-check picks) run
 * over a memory pipe, then the invariants are checked. Among them, the
 * fixes of earlier rounds: an abort in the same turn as a write that
 * finished at once comes too late (I5); a message cut short is a truncated
 * message, never the peer's end (I8); a write whose acknowledgement the
 * peer sent before closing resolves (I7).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { CPU_DEVICE } from "../src/device.js";
import { ErrorCode, TensorPipeError } from "../src/errors.js";
import type { Descriptor, Message } from "../src/message.js";
import type { Pipe } from "../src/pipe/pipe.js";
import { type MemoryConnection, MemoryNetwork } from "../src/testing/memory-connection.js";
import { type MemoryChannelKind, type MemoryPipeConnections, memoryPipePair } from "../src/testing/memory-pipe.js";

type Side = "client" | "server";
type Abort = "none" | "abort now" | "timeout now" | "later";
type Conn = "main" | "reply" | "channel";

type Action =
  | { t: "write"; side: Side; size: number; picked: boolean; abort: Abort }
  | { t: "readMessage"; side: Side; abort: Abort }
  | { t: "readDescriptor"; side: Side; abort: Abort }
  | { t: "read"; side: Side; abort: Abort }
  | { t: "abortLater"; side: Side; timeout: boolean }
  | { t: "deliver"; picks: number[] }
  | { t: "close"; side: Side }
  | { t: "cut"; side: Side; conn: Conn }
  | { t: "end"; side: Side; conn: Conn };

const side = fc.constantFrom<Side>("client", "server");
const abort = fc.constantFrom<Abort>("none", "none", "none", "abort now", "timeout now", "later");
const conn = fc.constantFrom<Conn>("main", "reply", "channel");
const action: fc.Arbitrary<Action> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ t: fc.constant("write" as const), side, size: fc.integer({ min: 0, max: 48 }), picked: fc.boolean(), abort }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constant("readMessage" as const), side, abort }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("readDescriptor" as const), side, abort }) },
  { weight: 3, arbitrary: fc.record({ t: fc.constant("read" as const), side, abort }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("abortLater" as const), side, timeout: fc.boolean() }) },
  { weight: 8, arbitrary: fc.record({ t: fc.constant("deliver" as const), picks: fc.array(fc.nat(7), { minLength: 1, maxLength: 6 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("close" as const), side }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("cut" as const), side, conn }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("end" as const), side, conn }) },
);

interface Op {
  side: Side;
  kind: "write" | "readMessage" | "readDescriptor" | "read";
  /** Message id, for writes. */
  id?: number;
  /** For writes: whether it could go at once (its tensor's device known, no earlier write of this side waiting, every connection of this side open). */
  atOnce?: boolean;
  /** Whether the pipe was over when the call was made. */
  afterEnd: boolean;
  controller?: AbortController;
  abort: Abort;
  settled?: { ok: true; value: unknown } | { ok: false; error: unknown };
}

const turn = () => new Promise<void>((r) => setImmediate(r));
const other = (s: Side): Side => (s === "client" ? "server" : "client");

function content(id: number, size: number): Uint8Array {
  return Uint8Array.from({ length: size }, (_, i) => (id * 31 + i * 7) & 0xff);
}

function connection(c: MemoryPipeConnections, which: Conn): MemoryConnection {
  return which === "main" ? c.main : which === "reply" ? c.reply : c.channel[c.channel.length - 1]!;
}

const CODES = new Set<string>(Object.values(ErrorCode));

/** Runs `actions` over a fresh memory pipe and checks the invariants. */
async function run(kind: MemoryChannelKind, actions: Action[]): Promise<void> {
  const network = new MemoryNetwork();
  network.hold();
  const pair = memoryPipePair({ network, channel: kind, flightRecorder: 0 });
  const pipes: Record<Side, Pipe> = { client: pair.client, server: pair.server };
  const ops: Op[] = [];
  const offered: Partial<Record<Side, Descriptor>> = {};
  /** Message ids each side received, in the order its reads were issued. */
  const received: Record<Side, { op: Op; id: number; bytes: Uint8Array }[]> = { client: [], server: [] };
  const written: Record<Side, Op[]> = { client: [], server: [] };
  let nextId = 1;
  // What happened, for the invariants that hold only without it.
  const touched = { cut: false, ended: false, closed: new Set<Side>(), aborted: new Set<Side>() };

  const track = (op: Op, p: Promise<unknown>, onValue?: (v: unknown) => void) => {
    ops.push(op);
    p.then(
      (value) => {
        op.settled = { ok: true, value };
        onValue?.(value);
      },
      (error: unknown) => (op.settled = { ok: false, error }),
    );
  };
  const optionsFor = (op: Op) => {
    if (op.abort === "none") return undefined;
    op.controller = new AbortController();
    return { signal: op.controller.signal };
  };
  const abortNow = (op: Op) => {
    if (op.abort === "abort now") op.controller!.abort(new Error("aborted by the program"));
    if (op.abort === "timeout now") op.controller!.abort(new DOMException("timed out", "TimeoutError"));
    if (op.abort !== "none" && op.abort !== "later") touched.aborted.add(op.side);
  };
  const landed = (s: Side, op: Op, d: Descriptor, bytes: Uint8Array) => received[s].push({ op, id: Number(d.metadata.slice(1)), bytes });

  for (const a of actions) {
    switch (a.t) {
      case "write": {
        const id = nextId++;
        const mine = pair.connections[a.side];
        const atOnce = !a.picked && [mine.main, mine.reply, ...mine.channel].every((c) => !c.isClosed) && written[a.side].every((w) => w.settled);
        const op: Op = { side: a.side, kind: "write", id, atOnce, afterEnd: pipes[a.side].isClosed, abort: a.abort };
        const m: Message = {
          metadata: `m${id}`,
          tensors: [{ buffer: content(id, a.size), ...(a.picked ? { targetDevice: null } : { targetDevice: CPU_DEVICE }) }],
        };
        track(op, pipes[a.side].write(m, optionsFor(op)));
        written[a.side].push(op);
        abortNow(op);
        break;
      }
      case "readMessage": {
        const op: Op = { side: a.side, kind: "readMessage", afterEnd: pipes[a.side].isClosed, abort: a.abort };
        track(op, pipes[a.side].readMessage(optionsFor(op)), (m) => {
          const r = m as { metadata: string; tensors: { buffer: Uint8Array; length: number }[] };
          landed(a.side, op, r as unknown as Descriptor, r.tensors[0]!.buffer.subarray(0, r.tensors[0]!.length));
        });
        abortNow(op);
        break;
      }
      case "readDescriptor": {
        if (offered[a.side]) break;
        const op: Op = { side: a.side, kind: "readDescriptor", afterEnd: pipes[a.side].isClosed, abort: a.abort };
        track(op, pipes[a.side].readDescriptor(optionsFor(op)), (d) => (offered[a.side] = d as Descriptor));
        abortNow(op);
        break;
      }
      case "read": {
        const d = offered[a.side];
        if (!d) break;
        offered[a.side] = undefined;
        const op: Op = { side: a.side, kind: "read", afterEnd: pipes[a.side].isClosed, abort: a.abort };
        const buffer = new Uint8Array(d.tensors[0]!.length);
        track(op, pipes[a.side].read({ payloads: [], tensors: [{ buffer }] }, optionsFor(op)), () => landed(a.side, op, d, buffer));
        abortNow(op);
        break;
      }
      case "abortLater": {
        const op = ops.find((o) => o.side === a.side && o.abort === "later" && !o.settled && !o.controller!.signal.aborted);
        if (!op) break;
        touched.aborted.add(a.side);
        op.controller!.abort(a.timeout ? new DOMException("timed out", "TimeoutError") : new Error("aborted later"));
        break;
      }
      case "deliver": {
        for (const p of a.picks) {
          const waiting = network.pending();
          if (waiting.length === 0) break;
          network.step(waiting[p % waiting.length]!.to);
          await turn();
        }
        break;
      }
      case "close":
        touched.closed.add(a.side);
        pipes[a.side].close();
        break;
      case "cut":
        touched.cut = true;
        connection(pair.connections[a.side], a.conn).cut();
        break;
      case "end":
        touched.ended = true;
        connection(pair.connections[a.side], a.conn).close();
        break;
    }
    await turn();
  }
  // Everything still on its way arrives; then both ends close.
  network.release();
  for (let i = 0; i < 20; i++) await turn();
  pipes.client.close();
  pipes.server.close();
  for (let i = 0; i < 20; i++) await turn();
  const finalError = { client: await pipes.client.closed, server: await pipes.server.closed };

  // I2: nothing hangs.
  expect(ops.filter((o) => !o.settled).map((o) => `${o.side} ${o.kind}`)).toEqual([]);
  for (const op of ops) {
    if (op.settled!.ok) continue;
    const error = op.settled!.error;
    // I3: every failure is a TensorPipeError with a known code.
    expect(error).toBeInstanceOf(TensorPipeError);
    expect(CODES.has((error as TensorPipeError).code)).toBe(true);
    // I4: a call on a pipe that is over gets the error it ended with.
    if (op.afterEnd) expect(error).toBe(finalError[op.side]);
  }
  for (const s of ["client", "server"] as const) {
    const peer = other(s);
    // I1: what a side receives is what its peer wrote, in order, none skipped, every byte.
    const ids = received[s].map((r) => r.id);
    const sent = written[peer].map((o) => o.id!);
    expect(ids).toEqual(sent.slice(0, ids.length));
    for (const r of received[s]) expect([...r.bytes]).toEqual([...content(r.id, r.bytes.length)]);
    // I5: over frames a write that could go at once finishes at once, so an
    // abort or a timeout in the same turn comes too late: it neither fails
    // the write nor the pipe.
    if (kind === "frames") {
      for (const w of written[s]) {
        if (!w.atOnce || w.afterEnd) continue;
        const code = w.settled!.ok ? undefined : (w.settled!.error as TensorPipeError).code;
        if (w.abort === "abort now" || w.abort === "timeout now")
          expect(code === ErrorCode.ABORTED || code === ErrorCode.TIMEOUT, `write ${w.id} said ${code}`).toBe(false);
      }
    }
    // I7: a write the peer read resolves, though the peer closed at once, unless this side cut, closed or aborted itself.
    if (kind === "acknowledged" && !touched.cut && !touched.ended && !touched.closed.has(s) && !touched.aborted.has(s) && !touched.aborted.has(peer)) {
      for (const w of written[s]) {
        if (received[peer].some((r) => r.id === w.id)) expect(w.settled, `write ${w.id} was read by the peer`).toMatchObject({ ok: true });
      }
    }
    // I8: a read whose message was cut short is a truncated message, never the peer's end.
    for (const op of ops) {
      if (op.side !== s || op.kind !== "read" || op.afterEnd || op.settled!.ok) continue;
      const error = op.settled!.error as TensorPipeError;
      if (error.code === ErrorCode.PEER_CLOSED) expect(error, `read failed with ${error.message}`).toBe(finalError[s]);
      if (error.code === ErrorCode.PEER_CLOSED) expect(error.message).not.toMatch(/^read: peer closed the connection/);
    }
  }
}

/**
 * Programs every run plays besides the random ones (TP_MODEL_RUNS counts
 * them among its runs, first): the peer reads a message, acknowledges it
 * and closes, and its main connection's end is delivered before the
 * acknowledgement (upstream's benchmark, I7).
 */
const EXAMPLES: [Action[]][] = [
  [
    [
      { t: "write", side: "client", size: 8, picked: false, abort: "none" },
      { t: "readMessage", side: "server", abort: "none" },
      // The tensor, then the descriptor: the server reads and acknowledges.
      { t: "deliver", picks: [0, 0] },
      { t: "close", side: "server" },
      // Waiting for the client: the acknowledgement, then its channel's end, main's end, ...: main's first.
      { t: "deliver", picks: [1, 0, 0, 0, 0] },
    ],
  ],
  // The server's write times out (its pipe fails) while the client waits
  // on a reply: the client holds the server's end for its notice, and a
  // read it starts meanwhile must get the error the pipe ends with (I4).
  [
    [
      { t: "write", side: "server", size: 0, picked: true, abort: "timeout now" },
      { t: "readDescriptor", side: "client", abort: "none" },
      { t: "deliver", picks: [0, 0] },
      { t: "write", side: "client", size: 0, picked: true, abort: "none" },
      { t: "read", side: "client", abort: "none" },
    ],
  ],
  // Two reads taken at once, the first waiting for a byte after its reply,
  // the second for nothing: the second settled first (I1).
  [
    [
      { t: "readMessage", side: "server", abort: "none" },
      { t: "write", side: "client", size: 1, picked: true, abort: "none" },
      { t: "readMessage", side: "server", abort: "none" },
      { t: "write", side: "client", size: 0, picked: false, abort: "none" },
    ],
  ],
];

describe("a pipe's state machine, against random programs", () => {
  it.each(["frames", "acknowledged"] as const)(
    "keeps its invariants over a %s channel",
    async (kind) => {
      await fc.assert(
        fc.asyncProperty(fc.array(action, { minLength: 1, maxLength: 24 }), (actions) => run(kind, actions)),
        // TP_MODEL_SEED and TP_MODEL_PATH replay a failure as fast-check reported it.
        {
          numRuns: Number(process.env.TP_MODEL_RUNS ?? 1500),
          examples: EXAMPLES,
          ...(process.env.TP_MODEL_SEED ? { seed: Number(process.env.TP_MODEL_SEED), path: process.env.TP_MODEL_PATH } : {}),
        },
      );
    },
    120_000,
  );
});
