/**
 * The flight recorder: each pipe's last events, bounded, on demand and on
 * the error that ends it; a failed handshake's steps on its error.
 */
import { ErrorCode, type FlightEvent, type TensorPipeError, describeFlightEvents } from "@tensorpipe/core";
import { describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { closedAfterEach } from "./contexts.js";

const { context, closeLater } = closedAfterEach();

async function pipePair(options?: Parameters<typeof createContext>[0], urls = ["uv://127.0.0.1:0", "shm://"]) {
  const server = await context(options);
  const client = await context(options);
  const l = await server.listen(urls);
  closeLater(() => l.close());
  const [here, there] = await Promise.all([client.connect(l.addresses()[0]!), l.accept()]);
  closeLater(() => here.close());
  return { client, server, here, there };
}

const kinds = (events: readonly FlightEvent[]) => events.map((e) => e.kind);

describe("the flight recorder", () => {
  it("keeps a live pipe's handshake, path and messages, on demand, for one pipe or the whole context", async () => {
    const { client, here, there } = await pipePair();
    await here.write({ metadata: "hi", payloads: [{ data: new Uint8Array(10) }], tensors: [{ buffer: new Float32Array(4) }] });
    const got = await there.readMessage();
    expect(got.metadata).toBe("hi");
    const mine = here.flightRecord();
    expect(kinds(mine)).toEqual(["handshake", "handshake", "path", "handshake", "write"]);
    expect(mine[2]!.detail).toMatch(/connect side: transport shm; channels cpu:0->cpu:0 cma/);
    expect(mine[4]).toMatchObject({ kind: "write", bytes: 26 });
    const theirs = there.flightRecord();
    expect(kinds(theirs)).toEqual(["handshake", "handshake", "path", "handshake", "handshake", "descriptor", "read"]);
    expect(theirs.at(-1)).toMatchObject({ kind: "read", bytes: 26 });
    const timed = theirs.filter((e) => e.at !== undefined).map((e) => e.at!);
    expect(timed).toEqual([...timed].sort((a, b) => a - b));
    expect(timed.length).toBeGreaterThanOrEqual(5);
    expect(client.flightRecords()).toEqual([{ pipe: here, events: here.flightRecord() }]);
    expect(describeFlightEvents(mine)).toMatch(/^\+0\.000 ms handshake dial uv:\/\/\S+ over uv\n/);
  });

  it("times a message that does not finish at once", async () => {
    const { here, there } = await pipePair(undefined, ["uv://127.0.0.1:0"]);
    const big = new Uint8Array(8 << 20);
    await Promise.all([here.write({ tensors: [{ buffer: big }] }), there.readMessage()]);
    const done = [...here.flightRecord(), ...there.flightRecord()].filter((e) => e.kind === "written" || e.kind === "received");
    expect(done.length).toBeGreaterThan(0);
    for (const e of done) expect(e.ms).toBeGreaterThanOrEqual(0);
  });

  it("keeps only the last events it was sized for", async () => {
    const { here, there } = await pipePair({ flightRecorder: 8 });
    for (let i = 0; i < 100; i++) await Promise.all([here.write({ payloads: [{ data: new Uint8Array(i) }] }), there.readMessage()]);
    const events = here.flightRecord();
    expect(events).toHaveLength(8);
    expect(events.map((e) => e.bytes)).toEqual([92, 93, 94, 95, 96, 97, 98, 99]);
  });

  it("hands its events to the error that ends the pipe, and to every operation that fails with it", async () => {
    const { here, there } = await pipePair();
    await Promise.all([here.write({ metadata: "one" }), there.readMessage()]);
    const reading = here.readMessage();
    const writing = there.write({ tensors: [{ buffer: new Uint8Array(1 << 20) }] });
    await reading;
    await writing;
    const pending = here.readDescriptor();
    there.close();
    const err = (await pending.catch((e: unknown) => e)) as TensorPipeError;
    expect(err.code).toBe(ErrorCode.PEER_CLOSED);
    expect(kinds(err.flightRecord!)).toEqual(expect.arrayContaining(["handshake", "path", "write", "descriptor", "read"]));
    expect(err.flightRecord!.at(-1)).toMatchObject({
      kind: "closed",
      detail: expect.stringMatching(/^ended by the peer between messages \(ERR_TP_PEER_CLOSED/),
    });
    expect(await here.closed).toBe(err);
    // The side that closed says so, as its last event.
    expect((await there.closed).flightRecord!.at(-1)).toMatchObject({ kind: "closed", detail: "closed here" });
  });

  it("ends its record with the error of a pipe that failed in the middle of a message", async () => {
    const { here, there } = await pipePair({ transports: ["uv"], channels: ["basic"] }, ["uv://127.0.0.1:0"]);
    there.write({ tensors: [{ buffer: new Uint8Array(64 << 20) }] }).catch(() => undefined);
    const d = await here.readDescriptor();
    const read = here.read({ tensors: [{ buffer: new Uint8Array(d.tensors[0]!.length) }] });
    there.close();
    const err = (await read.catch((e: unknown) => e)) as TensorPipeError;
    expect([ErrorCode.PEER_CLOSED, ErrorCode.CONNECTION_RESET]).toContain(err.code);
    expect(kinds(err.flightRecord!).slice(-3)).toEqual(["descriptor", "read", "error"]);
    expect(err.flightRecord!.at(-2)).toMatchObject({ bytes: 64 << 20 });
    expect(err.flightRecord!.at(-1)!.detail).toMatch(/^ERR_TP_(PEER_CLOSED|CONNECTION_RESET): /);
  });

  it("calls a peer's close while this side's write is unfinished an error: counted, and recorded as one", async () => {
    const { here, there } = await pipePair();
    expect(here.channelFor({ type: "cpu", index: 0 }, { type: "cpu", index: 0 })).toBe("cma");
    // Read by address over cma: the write is unfinished until the peer reads.
    const writing = here.write({ tensors: [{ buffer: new Uint8Array(128 << 20) }] });
    await there.readDescriptor();
    there.close();
    const err = (await writing.catch((e: unknown) => e)) as TensorPipeError;
    expect(err.code).toBe(ErrorCode.PEER_CLOSED);
    expect(here.stats().errors).toEqual({ [ErrorCode.PEER_CLOSED]: 1 });
    expect(here.flightRecord().at(-1)).toMatchObject({ kind: "error", detail: expect.stringMatching(/write\(s\) of this side unfinished/) });
  });

  it("records refused operations without ending the pipe", async () => {
    const { here } = await pipePair();
    await expect(here.write({ tensors: [{ buffer: new ArrayBuffer(4) as never }] })).rejects.toMatchObject({ code: ErrorCode.INVALID_ARG });
    expect(here.flightRecord().at(-1)).toMatchObject({ kind: "error", detail: expect.stringMatching(/^refused: ERR_TP_INVALID_ARG: tensor 0/) });
  });

  it("hands a failed handshake's steps to its error, on both sides", async () => {
    const server = await context({ transports: ["uv"], channels: ["basic"] });
    const client = await context();
    const l = await server.listen("uv://127.0.0.1:0", { path: { channels: ["basic"] } });
    closeLater(() => l.close());
    const dropped = new Promise<TensorPipeError>((resolve) => l.once("connectionError", resolve));
    const err = (await client.connect(l.addresses()[0]!, { path: { channels: ["cma"] } }).catch((e: unknown) => e)) as TensorPipeError;
    expect(err.code).toBe(ErrorCode.NEGOTIATION);
    expect(kinds(err.flightRecord!)).toEqual(["handshake", "handshake", "error"]);
    expect(err.flightRecord![1]!.detail).toMatch(/^connected; offering transports .*uv/);
    const theirs = await dropped;
    expect(kinds(theirs.flightRecord!)[0]).toBe("handshake");
    expect(theirs.flightRecord![0]!.detail).toMatch(/^connection from 127\.0\.0\.1:\d+ over uv/);
  });

  it("is off with flightRecorder: 0, and refuses a size that is not a whole number", async () => {
    const { client, here, there } = await pipePair({ flightRecorder: 0 });
    await Promise.all([here.write({ metadata: "x" }), there.readMessage()]);
    expect(here.flightRecord()).toEqual([]);
    expect(client.flightRecords()).toEqual([]);
    there.close();
    expect((await here.closed).flightRecord).toBeUndefined();
    await expect(createContext({ flightRecorder: -1 })).rejects.toMatchObject({
      code: ErrorCode.INVALID_ARG,
      message: expect.stringMatching(/flightRecorder/),
    });
    await expect(createContext({ flightRecorder: "3" as never })).rejects.toMatchObject({
      message: expect.stringMatching(/flightRecorder must be .*, got the string "3"$/),
    });
  });
});
