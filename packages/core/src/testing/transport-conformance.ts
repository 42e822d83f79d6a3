import { SUITE_TIMEOUT_MS, afterEach, beforeEach, describe, expect, it } from "./vitest.js";
import { ErrorCode } from "../errors.js";
import type { Connection, TransportContext, TransportListener } from "../transport.js";
import { hasPattern, patterned, prng } from "./patterns.js";

export interface TransportConformanceOptions {
  /** Shown in test names. */
  name: string;
  create(): TransportContext | Promise<TransportContext>;
  /** Where to listen, with a free port or name chosen by the transport if possible. */
  listenAddress(): string;
  /** Size of the large-frame test; at least 256 MiB unless the machine can't. */
  largeFrameBytes?: number | undefined;
  /**
   * Small frames of readFrame() are lent from one buffer of the connection
   * (as the native transports do), which the suite then checks; a transport
   * that gives fresh memory leaves this out.
   */
  lendsFrames?: boolean | undefined;
  /** Each test's and hook's time limit in ms (default 60,000, whatever the runner's default). */
  timeout?: number | undefined;
}

/** The next frame of readFrame(), with what its callback saw of it while it was lent. */
function nextFrame(c: Connection, maxLength: number, tag: number): Promise<{ frame: Uint8Array; intact: boolean }> {
  return new Promise((resolve, reject) =>
    c.readFrame!(maxLength, (err, frame) => (err ? reject(err) : resolve({ frame: frame!, intact: hasPattern(frame!, tag) }))),
  );
}

const MiB = 1024 * 1024;

/**
 * The behaviour every transport must have, run by each transport package
 * against itself: order, concurrency, empty and huge frames, bounds, close
 * and errors.
 */
export function describeTransportConformance(options: TransportConformanceOptions): void {
  const timeout = options.timeout ?? SUITE_TIMEOUT_MS;
  describe(`transport conformance: ${options.name}`, { timeout }, () => {
    let transport: TransportContext;
    let listener: TransportListener | undefined;
    const open: Connection[] = [];

    beforeEach(async () => {
      transport = await options.create();
    }, timeout);

    afterEach(async () => {
      for (const c of open.splice(0)) c.close();
      listener?.close();
      listener = undefined;
      await transport.close();
    }, timeout);

    async function pair(): Promise<[Connection, Connection]> {
      let accepted!: (c: Connection) => void;
      const acceptedP = new Promise<Connection>((r) => (accepted = r));
      listener = await transport.listen(options.listenAddress(), (c) => accepted(c));
      const client = await transport.connect(listener.address());
      const server = await acceptedP;
      open.push(client, server);
      return [client, server];
    }

    it("is viable and has a domain descriptor", () => {
      expect(transport.isViable()).toEqual({ viable: true });
      expect(transport.domainDescriptor()).toMatch(/.+/);
    });

    it("delivers frames intact and in order, both ways", async () => {
      const [a, b] = await pair();
      const rand = prng(1);
      const sizes = Array.from({ length: 200 }, () => Math.floor(rand() ** 4 * 300_000));
      const writes = sizes.map((n, i) => a.write([patterned(n, i)]));
      const back = sizes.map((n, i) => b.write([patterned(n, 1000 + i)]));
      for (let i = 0; i < sizes.length; i++) {
        const frame = await b.read(1 << 20);
        expect(frame.byteLength).toBe(sizes[i]);
        expect(hasPattern(frame, i)).toBe(true);
        const target = new Uint8Array(sizes[i]!);
        await a.readInto(target);
        expect(hasPattern(target, 1000 + i)).toBe(true);
      }
      await Promise.all([...writes, ...back]);
    });

    it("writes several frames in one call, in order", async () => {
      const [a, b] = await pair();
      // Not awaited first: a transport with small buffers completes a write only as the reader drains it.
      const wrote = a.write([patterned(3, 1), patterned(70_000, 2), new Uint8Array(0), patterned(5, 3)]);
      expect(hasPattern(await b.read(1 << 20), 1)).toBe(true);
      expect(hasPattern(await b.read(1 << 20), 2)).toBe(true);
      expect((await b.read(1 << 20)).byteLength).toBe(0);
      expect(hasPattern(await b.read(1 << 20), 3)).toBe(true);
      await wrote;
    });

    it("keeps 2000 writes and reads in flight at once", async () => {
      const [a, b] = await pair();
      const n = 2000;
      const writes = Array.from({ length: n }, (_, i) => a.write([patterned(64 + (i % 100), i)]));
      const targets = Array.from({ length: n }, (_, i) => new Uint8Array(64 + (i % 100)));
      const reads = targets.map((t) => b.readInto(t));
      await Promise.all([...writes, ...reads]);
      targets.forEach((t, i) => expect(hasPattern(t, i)).toBe(true));
    });

    it("carries zero-length frames", async () => {
      const [a, b] = await pair();
      await a.write([new Uint8Array(0)]);
      await a.write([new Uint8Array(0)]);
      expect((await b.read(0)).byteLength).toBe(0);
      await b.readInto(new Uint8Array(0));
    });

    it("gives readFrame's callback each frame intact, and leaves frames from read() as they were", async () => {
      const [a, b] = await pair();
      if (!b.readFrame) return;
      const sizes = [10, 20, 5000, 30, 0, 40];
      const wrote = a.write(sizes.map((n, i) => patterned(n, i)));
      const kept = await b.read(64);
      for (let i = 1; i < sizes.length; i++) {
        const { frame, intact } = await nextFrame(b, 1 << 20, i);
        expect(frame.byteLength).toBe(sizes[i]);
        expect(intact).toBe(true);
      }
      expect(hasPattern(kept, 0)).toBe(true);
      await wrote;
    });

    it.runIf(options.lendsFrames)("lends readFrame's small frames from one buffer, and gives large ones memory of their own", async () => {
      const [a, b] = await pair();
      const wrote = a.write([patterned(10, 1), patterned(20, 2), patterned(5000, 3), patterned(30, 4), patterned(30, 5)]);
      const first = await nextFrame(b, 1 << 20, 1);
      const second = await nextFrame(b, 1 << 20, 2);
      const large = await nextFrame(b, 1 << 20, 3);
      const last = await nextFrame(b, 1 << 20, 4);
      const sameLength = await nextFrame(b, 1 << 20, 5);
      expect([first, second, large, last, sameLength].every((f) => f.intact)).toBe(true);
      // Frames of one length come as one view: no object a frame.
      expect(sameLength.frame).toBe(last.frame);
      for (const f of [first, second, last]) {
        expect(f.frame.buffer).toBe(last.frame.buffer);
        expect(f.frame.byteOffset).toBe(0);
      }
      // The lent bytes are the last frame's now; the large frame kept its own.
      expect(hasPattern(new Uint8Array(second.frame.buffer, 0, 30), 5)).toBe(true);
      expect(large.frame.buffer).not.toBe(last.frame.buffer);
      expect(hasPattern(large.frame, 3)).toBe(true);
      await wrote;
    });

    it("reads on intact after a frame's buffer was transferred away", async () => {
      const [a, b] = await pair();
      await a.write([patterned(40, 8), patterned(40, 9)]);
      const first = await b.read(64);
      const offset = first.byteOffset;
      const moved = structuredClone(first.buffer as ArrayBuffer, { transfer: [first.buffer as ArrayBuffer] });
      expect(hasPattern(await b.read(64), 9)).toBe(true);
      expect(hasPattern(new Uint8Array(moved, offset, 40), 8)).toBe(true);
    });

    it.runIf(options.lendsFrames)("leaves alone a lent buffer that the callback transferred away", async () => {
      const [a, b] = await pair();
      const wrote = a.write([patterned(40, 6), patterned(40, 7)]);
      const moved = await new Promise<ArrayBuffer>((resolve, reject) =>
        b.readFrame!(64, (err, frame) =>
          err ? reject(err) : resolve(structuredClone(frame!.buffer as ArrayBuffer, { transfer: [frame!.buffer as ArrayBuffer] })),
        ),
      );
      const next = await nextFrame(b, 64, 7);
      expect(next.intact).toBe(true);
      expect(hasPattern(new Uint8Array(moved, 0, 40), 6)).toBe(true);
      await wrote;
    });

    it("reads into a view at an offset of a larger buffer, and from typed arrays of any kind", async () => {
      const [a, b] = await pair();
      const src = new Float64Array([1.5, -2.25, 3e300]);
      await a.write([src]);
      const backing = new ArrayBuffer(64);
      const target = new Float64Array(backing, 16, 3);
      await b.readInto(target);
      expect([...target]).toEqual([...src]);
      expect(new Uint8Array(backing, 0, 16).every((x) => x === 0)).toBe(true);
      expect(new Uint8Array(backing, 40).every((x) => x === 0)).toBe(true);
    });

    it("moves a large frame straight into the target", async () => {
      const size = options.largeFrameBytes ?? 256 * MiB;
      const [a, b] = await pair();
      const src = patterned(size, 77);
      const target = new Uint8Array(size);
      await Promise.all([a.write([src]), b.readInto(target)]);
      expect(hasPattern(target, 77)).toBe(true);
    });

    it("rejects a frame longer than read's limit as a protocol error", async () => {
      const [a, b] = await pair();
      await a.write([new Uint8Array(100)]);
      await expect(b.read(99)).rejects.toMatchObject({ code: ErrorCode.PROTOCOL });
      await expect(b.read(1000)).rejects.toMatchObject({ code: ErrorCode.PROTOCOL });
    });

    it("rejects a frame whose size differs from readInto's target", async () => {
      const [a, b] = await pair();
      await a.write([new Uint8Array(10)]);
      await expect(b.readInto(new Uint8Array(11))).rejects.toMatchObject({ code: ErrorCode.PROTOCOL });
    });

    it("rejects pending reads with ERR_TP_PEER_CLOSED when the peer closes", async () => {
      const [a, b] = await pair();
      const pending = b.read(100);
      a.close();
      await expect(pending).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
      await expect(b.read(100)).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
      expect(await b.closed).toMatchObject({ code: ErrorCode.PEER_CLOSED });
    });

    it("delivers every frame the peer wrote before it closed, read after its close, then ERR_TP_PEER_CLOSED", async () => {
      const [a, b] = await pair();
      // Small enough to sit whole in the smallest ring a transport may be tested with (shm: 4 KiB).
      const sizes = [10, 2000, 0, 300, 5];
      await a.write(sizes.map((n, i) => patterned(n, i)));
      a.close();
      // Its end reaches this side before anything here reads.
      await new Promise((r) => setTimeout(r, 50));
      for (const [i, n] of sizes.entries()) {
        const frame = await b.read(1 << 20);
        expect(frame.byteLength).toBe(n);
        expect(hasPattern(frame, i)).toBe(true);
      }
      await expect(b.read(100)).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
    });

    it("rejects a frame cut short by the peer as a broken connection", async () => {
      const [a, b] = await pair();
      const target = new Uint8Array(64 * MiB);
      const pending = b.readInto(target);
      // Half a frame: the writer is closed while the bytes are still going
      // out, a turn of the loop after the write (a transport may hold a
      // write back until then), long before 64 MiB can have gone.
      void a.write([new Uint8Array(64 * MiB)]).catch(() => undefined);
      await new Promise((r) => setImmediate(r));
      a.close();
      await expect(pending).rejects.toMatchObject({ code: ErrorCode.CONNECTION_RESET });
    });

    it("rejects operations on a closed connection with ERR_TP_CLOSED", async () => {
      const [a] = await pair();
      const pending = a.read(100);
      a.close();
      await expect(pending).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await expect(a.write([new Uint8Array(1)])).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      await expect(a.readInto(new Uint8Array(1))).rejects.toMatchObject({ code: ErrorCode.CLOSED });
      expect(await a.closed).toBeUndefined();
    });

    it("refuses a connection where nobody listens", async () => {
      listener = await transport.listen(options.listenAddress(), (c) => c.close());
      const address = listener.address();
      listener.close();
      listener = undefined;
      await new Promise((r) => setTimeout(r, 20));
      await expect(transport.connect(address)).rejects.toMatchObject({ code: ErrorCode.CONNECTION_REFUSED });
    });

    it("stops connecting when the signal aborts", async () => {
      listener = await transport.listen(options.listenAddress(), (c) => open.push(c));
      const ac = new AbortController();
      ac.abort();
      await expect(transport.connect(listener.address(), { signal: ac.signal })).rejects.toMatchObject({
        code: ErrorCode.ABORTED,
      });
    });
  });
}
