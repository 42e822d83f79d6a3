import { type Connection, Context, type TransportContext } from "@tensorpipe/core/backend";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
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
});
