import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { DONE, NativeConnection, type NativeFrameConnection, writeFrame } from "../src/backend.js";
import { CHECK_EVERY, TURN_MS } from "../src/turn-budget.js";

/**
 * Operations completed at once in a turn, with a clock that moves TURN_MS
 * each time it is read: the clock is first read at the CHECK_EVERY-th, and
 * found spent at the next reading.
 */
const AT_ONCE_PER_TURN = 2 * CHECK_EVERY;

type ReadCallback = (err: Error | null, frame?: Uint8Array) => void;

/** A native connection whose writes finish at once until told otherwise, and whose reads are served by hand. */
class FakeNative implements NativeFrameConnection {
  finishWrites = true;
  readonly written: ArrayBufferView[][] = [];
  readonly writeCallbacks: ((err: Error | null) => void)[] = [];
  readonly ready: Uint8Array[] = [];
  readCallback?: ReadCallback;
  closed = false;

  write(frames: ArrayBufferView[], callback: (err: Error | null) => void): boolean {
    this.written.push(frames);
    if (!this.finishWrites) this.writeCallbacks.push(callback);
    return this.finishWrites;
  }
  read(_target: ArrayBufferView | null, _max: number, callback: ReadCallback): boolean | Uint8Array | Error {
    this.readCallback = callback;
    return this.ready.shift() ?? false;
  }
  close(): void {
    this.closed = true;
  }
  localAddress(): string {
    return "here";
  }
  remoteAddress(): string {
    return "there";
  }
}

/** Lets the loop turn where the count of operations completed at once starts again (it is watched for once 64 are counted). */
async function loopTurns(): Promise<void> {
  const native = new FakeNative();
  const c = new NativeConnection(native, "fake");
  for (let i = 0; i < 64; i++) {
    native.ready.push(new Uint8Array(1));
    c.readFrame(64, () => undefined);
  }
  await new Promise((r) => setImmediate(r));
}

describe("NativeConnection's hot path", () => {
  it("answers a write that finished at once with DONE, and a queued one with its own promise", async () => {
    const native = new FakeNative();
    const c = new NativeConnection(native, "fake");
    expect(c.write([new Uint8Array(1)])).toBe(DONE);
    native.finishWrites = false;
    const queued = c.write([new Uint8Array(1)]);
    expect(queued).not.toBe(DONE);
    native.writeCallbacks.shift()!(null);
    await expect(queued).resolves.toBeUndefined();
  });

  it("writeFrame reuses its array while writes finish at once, and leaves one that a write holds alone", () => {
    const native = new FakeNative();
    const c = new NativeConnection(native, "fake");
    const a = new Uint8Array([1]);
    const b = new Uint8Array([2]);
    writeFrame(c, a);
    writeFrame(c, b);
    expect(native.written[0]).toBe(native.written[1]);
    // Let go of once written: the caller's memory is not kept alive.
    expect(native.written[1]![0]).not.toBe(b);
    native.finishWrites = false;
    const held = new Uint8Array([3]);
    void writeFrame(c, held);
    native.finishWrites = true;
    writeFrame(c, new Uint8Array([4]));
    expect(native.written[2]).not.toBe(native.written[3]);
    expect(native.written[2]![0]).toBe(held);
  });

  it("readFrame calls back at once for a frame already here, later for one to come, in order with read()", async () => {
    const native = new FakeNative();
    const c = new NativeConnection(native, "fake");
    const got: number[] = [];
    native.ready.push(new Uint8Array([1]));
    c.readFrame(64, (err, frame) => got.push(err ? -1 : frame![0]!));
    expect(got).toEqual([1]);
    c.readFrame(64, (err, frame) => got.push(err ? -1 : frame![0]!));
    const promised = c.read(64);
    native.readCallback!(null, new Uint8Array([2]));
    native.readCallback!(null, new Uint8Array([3]));
    expect(got).toEqual([1, 2]);
    expect((await promised)[0]).toBe(3);
  });

  it("tells a waiting readFrame of a failure after close() returns, as a promise would", async () => {
    const native = new FakeNative();
    const c = new NativeConnection(native, "fake");
    const errors: (Error | null)[] = [];
    c.readFrame(64, (err) => errors.push(err));
    c.close(Object.assign(new Error("reset"), { code: "ECONNRESET" }));
    expect(errors).toEqual([]);
    await Promise.resolve();
    expect(errors).toHaveLength(1);
    expect(errors[0]).toMatchObject({ code: "ERR_TP_CONNECTION_RESET" });
    c.readFrame(64, (err) => errors.push(err));
    expect(errors[1]).toBe(errors[0]);
  });

  it("completes at once every read whose bytes are here while the turn is under TURN_MS, however many", async () => {
    await loopTurns();
    vi.spyOn(performance, "now").mockReturnValue(1);
    try {
      const native = new FakeNative();
      const c = new NativeConnection(native, "fake");
      const n = 20 * CHECK_EVERY;
      for (let i = 0; i < n; i++) native.ready.push(new Uint8Array([1]));
      let sync = 0;
      for (let i = 0; i < n; i++) c.readFrame(64, () => sync++);
      expect(sync).toBe(n);
    } finally {
      vi.restoreAllMocks();
    }
  });

  describe("with a clock that moves TURN_MS each time it is read", () => {
    beforeEach(() => {
      let now = 0;
      vi.spyOn(performance, "now").mockImplementation(() => (now += TURN_MS));
    });
    afterEach(() => {
      vi.restoreAllMocks();
    });

    it("puts reads past TURN_MS completed at once off to the next turn, in the order asked, over every connection", async () => {
      const native = new FakeNative();
      const other = new FakeNative();
      const c = new NativeConnection(native, "fake");
      const d = new NativeConnection(other, "fake");
      const n = AT_ONCE_PER_TURN + 10;
      // The tests before may have spent some of the count.
      await loopTurns();
      for (let i = 0; i < n; i++) native.ready.push(new Uint8Array([i % 256]));
      other.ready.push(new Uint8Array([7]));
      // Each read's frame, by the read's place in the order asked.
      const got: number[] = [];
      const reads: Promise<unknown>[] = [];
      for (let i = 0; i < n; i++) {
        if (i % 2 === 0) c.readFrame(64, (err, frame) => (got[i] = err ? -1 : frame![0]!));
        else reads.push(c.read(64).then((frame) => (got[i] = frame[0]!)));
      }
      let otherGot = -1;
      d.readFrame(64, (_err, frame) => (otherGot = frame![0]!));
      await Promise.resolve();
      // Every read called back or resolved so far completed at once.
      expect(got.filter((v) => v !== undefined)).toHaveLength(AT_ONCE_PER_TURN);
      expect(otherGot).toBe(-1);
      await new Promise((r) => setImmediate(r));
      await Promise.all(reads);
      expect(got).toEqual(Array.from({ length: n }, (_, i) => i % 256));
      expect(otherGot).toBe(7);
    });

    it("counts on through reads completed from the loop in the same turn: many connections woken at once share one count", async () => {
      await loopTurns();
      const woken = new FakeNative();
      const c = new NativeConnection(woken, "fake");
      const native = new FakeNative();
      const d = new NativeConnection(native, "fake");
      let served = -1;
      c.readFrame(64, (_err, frame) => (served = frame![0]!));
      for (let i = 0; i <= AT_ONCE_PER_TURN; i++) native.ready.push(new Uint8Array([1]));
      let sync = 0;
      for (let i = 0; i < AT_ONCE_PER_TURN - 1; i++) d.readFrame(64, () => sync++);
      // Another connection's wake-up, in the same turn.
      woken.readCallback!(null, new Uint8Array([9]));
      expect(served).toBe(9);
      d.readFrame(64, () => sync++);
      d.readFrame(64, () => sync++);
      expect(sync).toBe(AT_ONCE_PER_TURN);
      await new Promise((r) => setImmediate(r));
      expect(sync).toBe(AT_ONCE_PER_TURN + 1);
    });

    it("tells of writes done at once past TURN_MS in the next turn, in order, behind a read's count, and of none twice", async () => {
      await loopTurns();
      const native = new FakeNative();
      const c = new NativeConnection(native, "fake");
      native.ready.push(new Uint8Array([1]));
      c.readFrame(64, () => undefined);
      const told: number[] = [];
      const writes: Promise<void>[] = [];
      for (let i = 0; i < AT_ONCE_PER_TURN + 5; i++) writes.push(c.write([new Uint8Array([i % 256])]));
      // Every write went out at once; those past the count are told later.
      expect(native.written).toHaveLength(AT_ONCE_PER_TURN + 5);
      expect(writes.filter((w) => w === DONE)).toHaveLength(AT_ONCE_PER_TURN - 1);
      // One that completes from the loop meanwhile is told behind them.
      native.finishWrites = false;
      writes.push(c.write([new Uint8Array([7])]));
      writes.forEach((w, i) => void w.then(() => told.push(i)));
      native.writeCallbacks.shift()!(null);
      await Promise.resolve();
      expect(told.length).toBe(AT_ONCE_PER_TURN - 1);
      await new Promise((r) => setImmediate(r));
      await Promise.all(writes);
      expect(told).toEqual(Array.from({ length: AT_ONCE_PER_TURN + 6 }, (_, i) => i));
    });
  });
});
