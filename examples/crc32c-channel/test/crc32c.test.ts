import type { Connection, TransportContext } from "@tensorpipe/core/backend";
import { CPU_DEVICE, Context, ErrorCode } from "@tensorpipe/core";
import { describeChannelConformance, describeNegotiationConformance } from "@tensorpipe/core/testing";
import { UvTransport } from "@tensorpipe/transport-uv";
import { afterEach, describe, expect, it } from "vitest";
import { CRC32C_PRIORITY, Crc32cChannelContext, registerCrc32cChannel } from "../dist/index.js";

describeChannelConformance({
  name: "crc32c",
  create: () => new Crc32cChannelContext(),
  createTransport: () => new UvTransport(),
  transportName: "uv",
  listenUrl: () => "uv://127.0.0.1:0",
});

describeNegotiationConformance({
  kind: "channel",
  name: "crc32c",
  create: () => new Crc32cChannelContext(),
  priority: CRC32C_PRIORITY,
  transport: { name: "uv", create: () => new UvTransport(), listenUrl: "uv://127.0.0.1:0" },
});

/** A connection whose frames of `bitsFrom` bytes or more arrive with their first bit flipped, as a bad link would deliver them. */
function flipping(connection: Connection, bitsFrom: number): Connection {
  return new Proxy(connection, {
    get(target, key, receiver) {
      if (key !== "readInto") return Reflect.get(target, key, receiver);
      return async (into: Uint8Array) => {
        await target.readInto(into);
        if (into.byteLength >= bitsFrom) into[0]! ^= 1;
      };
    },
  });
}

/** uv, but every connection it makes or takes flips bits (see flipping()). */
function flippingUv(bitsFrom: number): TransportContext {
  const uv = new UvTransport();
  return new Proxy(uv, {
    get(target, key, receiver) {
      if (key === "connect") return async (address: string, options: { signal?: AbortSignal }) => flipping(await target.connect(address, options), bitsFrom);
      if (key === "listen")
        return (address: string, onConnection: (c: Connection) => void, ...rest: unknown[]) =>
          (target.listen as (...a: unknown[]) => unknown)(address, (c: Connection) => onConnection(flipping(c, bitsFrom)), ...rest);
      return Reflect.get(target, key, receiver);
    },
  });
}

describe("over a link that flips a bit", () => {
  const contexts: Context[] = [];
  afterEach(async () => {
    await Promise.all(contexts.splice(0).map((c) => c.close()));
  });

  it("fails the reading end with ERR_TP_DATA_CORRUPTED, and the writing end learns why", async () => {
    const server = new Context();
    const client = new Context();
    contexts.push(server, client);
    server.registerTransport(1, "uv", flippingUv(1024));
    client.registerTransport(1, "uv", new UvTransport());
    registerCrc32cChannel(server);
    registerCrc32cChannel(client);
    const listener = await server.listen("uv://127.0.0.1:0");
    const [writer, reader] = await Promise.all([client.connect(listener.addresses()[0]!), listener.accept()]);
    expect(writer.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("crc32c");
    const tensor = new Float32Array(4096).fill(1.5);
    const written = writer.write({ tensors: [{ buffer: tensor, targetDevice: CPU_DEVICE }] });
    await expect(reader.readMessage()).rejects.toMatchObject({
      code: ErrorCode.DATA_CORRUPTED,
      message: expect.stringMatching(/16384 bytes arrived with CRC32C/),
    });
    const told = {
      code: ErrorCode.DATA_CORRUPTED,
      message: expect.stringMatching(/^the peer failed the pipe: a tensor of 16384 bytes arrived with CRC32C 0x[0-9a-f]{8}, sent with 0x[0-9a-f]{8}/),
    };
    // The bytes may all have left before the reader looked at them: the write then resolved.
    await written.catch((e: unknown) => expect(e).toMatchObject(told));
    expect(await writer.closed).toMatchObject(told);
  });

  it("is viable here, where @node-rs/crc32 has its binary", () => {
    const context = new Crc32cChannelContext();
    expect(context.isViable()).toEqual({ viable: true });
  });
});
