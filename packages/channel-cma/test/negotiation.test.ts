import { type Channel, type Connection, CPU_DEVICE, Context, type Endpoint, type PipeInfo } from "@tensorpipe/core/backend";
import { describeNegotiationConformance } from "@tensorpipe/core/testing";
import { statSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";
import { CMA_PRIORITY, CmaChannelContext } from "../src/index.js";

/** How this process's wire extension names its network namespace. */
const NET = `;net:${statSync("/proc/self/ns/net").ino}`;

for (const transport of [
  { name: "uv", create: () => new UvTransport(), listenUrl: "uv://127.0.0.1:0" },
  { name: "shm", create: () => new ShmTransport(), listenUrl: "shm://*" },
]) {
  describeNegotiationConformance({ kind: "channel", name: "cma", create: () => new CmaChannelContext(), priority: CMA_PRIORITY, transport });
}

describe("cma's own wire between two tensorpipe-js ends", () => {
  /** A cma context that records the pipe info each channel it makes is given. */
  class Recording extends CmaChannelContext {
    readonly seen: (PipeInfo | undefined)[] = [];
    override createChannel(connections: readonly Connection[], endpoint: Endpoint, pipe?: PipeInfo): Channel {
      this.seen.push(pipe);
      return super.createChannel(connections, endpoint, pipe);
    }
  }

  it.each([
    [{}, {}, `inline:auto;per-end;pool${NET}`, `inline:auto;per-end;pool${NET}`],
    [{ inlineMax: 100 }, { inlineMax: 200 }, `inline:200;per-end;pool${NET}`, `inline:100;per-end;pool${NET}`],
  ])("is told to both ends in the handshake (%o here, %o there)", async (here, there, dialerSees, listenerSees) => {
    const [a, b] = [new Context(), new Context()];
    const [ca, cb] = [new Recording(here), new Recording(there)];
    for (const [context, cma] of [
      [a, ca],
      [b, cb],
    ] as const) {
      context.registerTransport(0, "uv", new UvTransport());
      context.registerChannel(CMA_PRIORITY, "cma", cma);
    }
    const listener = await b.listen("uv://127.0.0.1:0");
    const [pipe] = await Promise.all([a.connect(listener.addresses()[0]!), listener.accept()]);
    expect(pipe.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("cma");
    expect(ca.seen.map((p) => p?.peerWireExtension)).toEqual([dialerSees]);
    expect(cb.seen.map((p) => p?.peerWireExtension)).toEqual([listenerSees]);
    await a.close();
    await b.close();
  });
});
