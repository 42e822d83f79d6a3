import { SUITE_TIMEOUT_MS, afterEach, describe, expect, it } from "./vitest.js";
import type { Channel, ChannelContext } from "../channel.js";
import { Context } from "../context.js";
import { CPU_DEVICE, cpuBytes } from "../device.js";
import { ErrorCode, TensorPipeError } from "../errors.js";
import { type Connection, type TransportContext, writeFrame } from "../transport.js";
import { VIABLE, type Viability, notViable } from "../viability.js";

/** A transport as the negotiation suite registers it. */
export interface NegotiatedTransport {
  /** The name it is registered under. */
  name: string;
  /** A fresh instance. */
  create(): TransportContext;
  /** A URL to listen on ("uv://127.0.0.1:0", "shm://*"). */
  listenUrl: string;
}

/** What the negotiation suite needs: the backend under test, and a transport that works everywhere to fall back on. */
export type NegotiationConformanceOptions = (
  | {
      /** A transport under test. */
      kind: "transport";
      /** The transport, its name and where it listens. */
      backend: NegotiatedTransport;
      /** Its priority, above the fallback's. */
      priority: number;
      /** A transport of lower priority both ends have (uv). */
      fallback: NegotiatedTransport;
    }
  | {
      /** A channel under test, for CPU tensors. */
      kind: "channel";
      /** Its name. */
      name: string;
      /** A fresh instance. */
      create(): ChannelContext;
      /** Its priority: the suite's own fallback channel sits just below. */
      priority: number;
      /** The transport the pipes run on. */
      transport: NegotiatedTransport;
    }
) & {
  /** Each test's and hook's time limit in ms (default 60,000, whatever the runner's default). */
  timeout?: number | undefined;
};

/** The suite's own fallback channel's name: no backend under test has it. */
const FALLBACK_CHANNEL = "negotiation-conformance-fallback";

/** The fallback for channels: each tensor one frame on a connection of its own. */
class InlineChannelContext implements ChannelContext {
  isViable(): Viability {
    return VIABLE;
  }
  deviceDescriptors() {
    return [{ device: CPU_DEVICE, descriptor: "negotiation-conformance-inline" }];
  }
  numConnectionsNeeded(): number {
    return 1;
  }
  canCommunicateWithRemote(local: string, remote: string): boolean {
    return local === remote;
  }
  createChannel(connections: readonly Connection[]): Channel {
    const c = connections[0]!;
    return {
      send: (buffer, length) => writeFrame(c, cpuBytes(buffer, length, "inline")),
      recv: (buffer, length) => c.readInto(cpuBytes(buffer, length, "inline")),
      close: (error) => c.close(error),
    };
  }
  async close(): Promise<void> {}
}

/** `context` as registered, but not viable here. */
function unviable<T extends { isViable(): Viability }>(context: T): T {
  return new Proxy(context, {
    get: (target, key, receiver) => (key === "isViable" ? () => notViable("made not viable by the negotiation suite") : Reflect.get(target, key, receiver)),
  });
}

/** `context` whose channels land what they receive and then find it corrupted, as a checksum would. */
function corruptingRecv(context: ChannelContext): ChannelContext {
  return new Proxy(context, {
    get: (target, key, receiver) => {
      if (key !== "createChannel") return Reflect.get(target, key, receiver);
      return (...args: Parameters<ChannelContext["createChannel"]>): Channel => {
        const channel = target.createChannel(...args);
        return {
          send: (buffer, length) => channel.send(buffer, length),
          recv: (buffer, length) =>
            channel.recv(buffer, length).then(() => {
              throw new TensorPipeError(ErrorCode.DATA_CORRUPTED, `the negotiation suite found a tensor of ${length} bytes corrupted`, {
                where: "negotiation suite",
              });
            }),
          close: (error) => channel.close(error),
        };
      };
    },
  });
}

/**
 * Two contexts negotiate the backend under test: it is picked when both
 * ends have it and it outranks what else they share, and the pipe falls
 * back (and still carries a tensor) when one end lacks it, when it is not
 * viable at either end, and when it ranks below the fallback. A channel's
 * recv() that rejects fails the pipe on both ends, and the writing end
 * hears the reading end's error.
 */
export function describeNegotiationConformance(options: NegotiationConformanceOptions): void {
  const name = options.kind === "transport" ? options.backend.name : options.name;
  const timeout = options.timeout ?? SUITE_TIMEOUT_MS;
  describe(`negotiation conformance: ${options.kind} ${name}`, { timeout }, () => {
    const contexts: Context[] = [];
    afterEach(async () => {
      await Promise.all(contexts.splice(0).map((c) => c.close()));
    }, timeout);

    /** A context with the fallback, and with the backend under test unless `without`, as `shape` makes it. */
    function context(withBackend: boolean, shape: (c: ChannelContext | TransportContext) => typeof c = (c) => c, ranksBelow = false): Context {
      const ctx = new Context();
      contexts.push(ctx);
      if (options.kind === "transport") {
        const { backend, fallback, priority } = options;
        ctx.registerTransport(ranksBelow ? -1 : 0, fallback.name, fallback.create());
        if (withBackend) ctx.registerTransport(ranksBelow ? -2 : priority, backend.name, shape(backend.create()) as TransportContext);
        ctx.registerChannel(0, FALLBACK_CHANNEL, new InlineChannelContext());
      } else {
        ctx.registerTransport(0, options.transport.name, options.transport.create());
        ctx.registerChannel(options.priority - 1, FALLBACK_CHANNEL, new InlineChannelContext());
        if (withBackend) ctx.registerChannel(ranksBelow ? options.priority - 2 : options.priority, name, shape(options.create()) as ChannelContext);
      }
      return ctx;
    }

    /** Opens a pipe from `client` to `server`; returns what it negotiated, after a tensor went through. */
    async function negotiate(server: Context, client: Context): Promise<{ transport: string; channel: string | undefined }> {
      const urls =
        options.kind === "transport"
          ? [options.fallback.listenUrl, ...(server.backends().some((b) => b.name === options.backend.name) ? [options.backend.listenUrl] : [])]
          : [options.transport.listenUrl];
      const listener = await server.listen(urls);
      const [pipe, accepted] = await Promise.all([client.connect(listener.addresses()[0]!, { timeout: 10_000 }), listener.accept()]);
      const tensor = Uint8Array.from({ length: 4096 }, (_, i) => i % 251);
      const target = new Uint8Array(4096);
      await Promise.all([
        pipe.write({ tensors: [{ buffer: tensor, targetDevice: CPU_DEVICE }] }),
        accepted.readDescriptor().then(() => accepted.read({ payloads: [], tensors: [{ buffer: target }] })),
      ]);
      expect(target).toEqual(tensor);
      expect(accepted.transport).toBe(pipe.transport);
      expect(accepted.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe(pipe.channelFor(CPU_DEVICE, CPU_DEVICE));
      listener.close();
      return { transport: pipe.transport, channel: pipe.channelFor(CPU_DEVICE, CPU_DEVICE) };
    }

    const picked = (r: { transport: string; channel: string | undefined }) => (options.kind === "transport" ? r.transport : r.channel);
    const fallbackName = options.kind === "transport" ? options.fallback.name : FALLBACK_CHANNEL;

    it("is picked when both ends have it", async () => {
      expect(picked(await negotiate(context(true), context(true)))).toBe(name);
    });

    it("falls back when the listening end lacks it", async () => {
      expect(picked(await negotiate(context(false), context(true)))).toBe(fallbackName);
    });

    it("falls back when the connecting end lacks it", async () => {
      expect(picked(await negotiate(context(true), context(false)))).toBe(fallbackName);
    });

    it("falls back when it is not viable at one end, and says why there", async () => {
      const client = context(true, unviable);
      expect(client.backends().find((b) => b.name === name)?.viability).toMatchObject({ viable: false });
      expect(picked(await negotiate(context(true), client))).toBe(fallbackName);
    });

    it("respects priority: ranked below the fallback, it is not picked", async () => {
      expect(picked(await negotiate(context(true, undefined, true), context(true, undefined, true)))).toBe(fallbackName);
    });

    if (options.kind === "channel") {
      it("a recv that rejects fails both ends, and the writing end is told why", async () => {
        const listener = await context(true, (c) => corruptingRecv(c as ChannelContext)).listen([options.transport.listenUrl]);
        const [pipe, accepted] = await Promise.all([context(true).connect(listener.addresses()[0]!, { timeout: 10_000 }), listener.accept()]);
        expect(accepted.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe(name);
        const written = pipe.write({ tensors: [{ buffer: new Uint8Array(4096), targetDevice: CPU_DEVICE }] });
        await expect(accepted.readMessage()).rejects.toMatchObject({ code: ErrorCode.DATA_CORRUPTED });
        const told = { code: ErrorCode.DATA_CORRUPTED, message: expect.stringMatching(/^the peer failed the pipe: the negotiation suite found/) };
        // The bytes may all have left before the reader looked at them: the write then resolved.
        await written.catch((e: unknown) => expect(e).toMatchObject(told));
        expect(await pipe.closed).toMatchObject(told);
        listener.close();
      });
    }
  });
}
