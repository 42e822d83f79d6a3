import { type Connection, Context, type TransportContext } from "@tensorpipe/core/backend";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerCmaChannel } from "@tensorpipe/channel-cma";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { ErrorCode } from "@tensorpipe/core";
import { describe, expect, it } from "vitest";

const run = promisify(execFile);

/** Holds the loop for `ms`, as a server busy with a burst of accepts does. */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

/**
 * A transport whose first accepts each hold the loop for 300 ms once
 * delivered: the connections accepted meanwhile have sent their first
 * frame, but it waits unread past the grace the listener gives silent ones.
 */
function slowToRead<T extends TransportContext>(transport: T): T {
  const listen = transport.listen.bind(transport);
  let slow = 6;
  transport.listen = (address, onConnection, onError, options) =>
    listen(
      address,
      (c: Connection) => {
        onConnection(c);
        if (slow-- > 0) busy(300);
      },
      onError,
      options,
    );
  return transport;
}

const burstClient = fileURLToPath(new URL("../fixtures/burst-client.mjs", import.meta.url));

describe.each([
  ["uv", () => new UvTransport(), "uv://127.0.0.1:0"],
  ["shm", () => new ShmTransport(), "shm://*"],
] as const)("a burst of real connections over %s", (name, make, url) => {
  it("is not taken for silent peers when this loop is too busy to read their first frames in time", async () => {
    const server = new Context({ maxPendingHandshakes: 4 });
    server.registerTransport(0, name, slowToRead(make()));
    registerBasicChannel(server);
    try {
      const listener = await server.listen(url);
      const dropped: Error[] = [];
      listener.on("connectionError", (e: Error) => dropped.push(e));
      const accepted: unknown[] = [];
      void (async () => {
        for await (const pipe of listener) {
          accepted.push(pipe);
          void pipe.write({ metadata: "accepted" }).catch(() => undefined);
        }
      })();
      // Another process: its first frames go out while this loop is held.
      const { stdout } = await run(process.execPath, [burstClient, listener.addresses()[0]!, "40"]);
      expect(JSON.parse(stdout)).toEqual({ opened: 40 });
      expect(dropped.map((e) => e.message)).toEqual([]);
      expect(accepted).toHaveLength(40);
    } finally {
      await server.close();
    }
  });

  it("takes a pipe its peer closed as soon as connect() resolved (a health check) like any other: accepted, ended, nothing dropped", async () => {
    const contexts = [new Context(), new Context()];
    for (const c of contexts) {
      c.registerTransport(0, name, make());
      registerBasicChannel(c);
      registerCmaChannel(c);
    }
    const [server, client] = contexts as [Context, Context];
    try {
      const listener = await server.listen(url);
      const dropped: Error[] = [];
      listener.on("connectionError", (e: Error) => dropped.push(e));
      for (let i = 0; i < 10; i++) (await client.connect(listener.addresses()[0]!)).close();
      for (let i = 0; i < 10; i++) {
        const pipe = await listener.accept({ timeout: 5000 });
        await expect(pipe.readDescriptor()).rejects.toMatchObject({ code: ErrorCode.PEER_CLOSED });
      }
      expect(dropped.map((e) => e.message)).toEqual([]);
    } finally {
      await Promise.all(contexts.map((c) => c.close()));
    }
  });
});
