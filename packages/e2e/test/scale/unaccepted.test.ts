/**
 * Pipes a listener has handshaken and the application has not accepted:
 * at most ListenerOptions.maxUnaccepted wait at once, open or ended by
 * their peers. Without it one client that opens pipes and closes them (or
 * leaves them open) grows the server's memory and descriptors for as long
 * as it likes.
 */
import { ErrorCode, type TensorPipeError } from "@tensorpipe/core";
import { describe, expect, it } from "vitest";
import { closedAfterEach } from "../contexts.js";

const { context } = closedAfterEach();

describe.each([
  ["uv", "uv://127.0.0.1:0"],
  ["shm", "shm://*"],
] as const)("pipes waiting for accept() over %s", (transport, url) => {
  /** A client's context, and a listener of `maxUnaccepted` with the errors it reports. */
  async function limited(maxUnaccepted: number) {
    const server = await context({ transports: [transport] });
    const client = await context({ transports: [transport] });
    const listener = await server.listen(url, { maxUnaccepted });
    const refused: TensorPipeError[] = [];
    listener.on("connectionError", (e) => refused.push(e));
    return { client, listener, refused };
  }

  it("are at most maxUnaccepted: the next peer is turned away, saying why, until the application accepts", async () => {
    const { client, listener, refused } = await limited(3);
    const waiting = await Promise.all([1, 2, 3].map(() => client.connect(listener.url())));

    await expect(client.connect(listener.url())).rejects.toMatchObject({ code: ErrorCode.NEGOTIATION, message: expect.stringMatching(/maxUnaccepted/) });
    await expect.poll(() => refused.length).toBe(1);
    expect(refused[0]).toMatchObject({
      code: ErrorCode.CONNECTION_REFUSED,
      message: expect.stringMatching(/3 pipes wait for accept\(\) \(ListenerOptions\.maxUnaccepted\)/),
    });

    const accepted = [await listener.accept()];
    waiting.push(await client.connect(listener.url()));
    // The ones that waited are untouched, and the one let in after the accept works.
    await Promise.all(waiting.map((p, i) => p.write({ metadata: `pipe ${i}` })));
    for (let i = 0; i < 3; i++) accepted.push(await listener.accept());
    const got = await Promise.all(accepted.map((p) => p.readDescriptor()));
    expect(got.map((d) => d.metadata).sort()).toEqual(["pipe 0", "pipe 1", "pipe 2", "pipe 3"]);
  });

  it("turn nobody away from a listener that accepts as they come, however many handshake at once", async () => {
    const { client, listener, refused } = await limited(2);
    const served = (async () => {
      let n = 0;
      for await (const pipe of listener) {
        pipe.close();
        if (++n === 100) return n;
      }
      return n;
    })();
    const pipes = await Promise.all(Array.from({ length: 100 }, () => client.connect(listener.url())));
    expect(await served).toBe(100);
    expect(refused).toEqual([]);
    for (const p of pipes) p.close();
  });

  it("count until accepted when their peers closed them, as TCP's do: a client that connects and closes cannot grow the server past the limit", async () => {
    const { client, listener, refused } = await limited(4);
    // Round after round of pipes opened and closed at once, nobody accepting.
    let opened = 0;
    for (let round = 0; round < 3; round++) {
      const pipes = await Promise.allSettled([1, 2, 3, 4].map(() => client.connect(listener.url())));
      for (const p of pipes) {
        if (p.status !== "fulfilled") continue;
        opened++;
        p.value.close();
      }
    }
    expect(opened).toBe(4);
    await expect.poll(() => refused.length).toBe(8);
    // accept() gives each, ended: a health check is seen, not dropped.
    for (let i = 0; i < 4; i++) await expect((await listener.accept()).readDescriptor()).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
    const live = await client.connect(listener.url());
    await live.write({ metadata: "live" });
    expect((await (await listener.accept()).readDescriptor()).metadata).toBe("live");
  });
});

describe("ListenerOptions.maxUnaccepted", () => {
  it("takes a positive integer or Infinity, and says so otherwise", async () => {
    const server = await context({ transports: ["uv"] });
    for (const bad of [0, -1, 1.5, Number.NaN, "10"]) {
      await expect(server.listen("uv://127.0.0.1:0", { maxUnaccepted: bad as number }), String(bad)).rejects.toMatchObject({
        code: ErrorCode.INVALID_ARG,
        message: expect.stringMatching(/ListenerOptions\.maxUnaccepted must be a positive integer or Infinity/),
      });
    }
    const listener = await server.listen("uv://127.0.0.1:0", { maxUnaccepted: Infinity });
    listener.close();
  });
});
