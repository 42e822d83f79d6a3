/**
 * A channel's failed recv() or send() fails the pipe on both ends, and
 * between two ends of this library the peer learns why: the failing end
 * sends a failure notice on the reply connection before it closes.
 */
import type { Context } from "@tensorpipe/core";
import {
  type Channel,
  type ChannelContext,
  type Connection,
  CPU_DEVICE,
  ErrorCode,
  type TensorBuffer,
  TensorPipeError,
  VIABLE,
  cpuBytes,
} from "@tensorpipe/core/backend";
import { describe, expect, it } from "vitest";
import { closedAfterEach } from "./contexts.js";

const { context, closeLater } = closedAfterEach();

/** A sum of the bytes, as the checked channel sends it ahead of them. */
function sum(bytes: Uint8Array): number {
  let s = 0;
  for (const b of bytes) s = (s + b) >>> 0;
  return s;
}

/** A channel that checks each tensor's bytes on arrival; `flip` changes one on the way in, as a bad link would. */
function checkedChannel(flip: boolean): ChannelContext {
  const channel = (c: Connection): Channel => ({
    send(buffer: TensorBuffer, length: number) {
      const bytes = cpuBytes(buffer, length, "checked");
      const head = new Uint8Array(4);
      new DataView(head.buffer).setUint32(0, sum(bytes));
      return c.write([head, bytes]).then(() => undefined);
    },
    async recv(buffer: TensorBuffer, length: number) {
      const head = await c.read(4);
      const bytes = cpuBytes(buffer, length, "checked");
      await c.readInto(bytes);
      if (flip && bytes.length > 0) bytes[0]! ^= 1;
      const want = new DataView(head!.buffer, head!.byteOffset).getUint32(0);
      if (sum(bytes) !== want) {
        throw new TensorPipeError(ErrorCode.DATA_CORRUPTED, `a tensor of ${length} bytes arrived with checksum ${sum(bytes)}, sent with ${want}`, {
          where: "checked channel",
        });
      }
    },
    close: (error) => c.close(error),
  });
  return {
    isViable: () => VIABLE,
    deviceDescriptors: () => [{ device: CPU_DEVICE, descriptor: "checked-v1" }],
    numConnectionsNeeded: () => 1,
    canCommunicateWithRemote: (a, b) => a === b,
    createChannel: (connections) => channel(connections[0]!),
    close: async () => {},
  };
}

async function pair(setup: (server: Context, client: Context) => void) {
  const server = await context({ transports: ["uv"], channels: ["basic"] });
  const client = await context({ transports: ["uv"], channels: ["basic"] });
  setup(server, client);
  const l = await server.listen("uv://127.0.0.1:0");
  closeLater(() => l.close());
  const [writer, reader] = await Promise.all([client.connect(l.addresses()[0]!), l.accept()]);
  closeLater(() => writer.close());
  expect(writer.channelFor(CPU_DEVICE, CPU_DEVICE)).toBe("checked");
  return { writer, reader };
}

describe("a channel's failure", () => {
  it("a corrupted tensor fails the reading end with the channel's error and the writing end with its reason", async () => {
    const { writer, reader } = await pair((server, client) => {
      server.registerChannel(5000, "checked", checkedChannel(true));
      client.registerChannel(5000, "checked", checkedChannel(false));
    });
    const written = writer.write({ tensors: [{ buffer: new Uint8Array(4096).fill(7), targetDevice: CPU_DEVICE }] });
    await expect(reader.readMessage()).rejects.toMatchObject({ code: ErrorCode.DATA_CORRUPTED, message: expect.stringMatching(/checksum/) });
    const told = { code: ErrorCode.DATA_CORRUPTED, message: expect.stringMatching(/^the peer failed the pipe: a tensor of 4096 bytes arrived with checksum/) };
    // The tensor's bytes may all have left before the reader looked at them: the write then resolved.
    await written.catch((e: unknown) => expect(e).toMatchObject(told));
    expect(await writer.closed).toMatchObject(told);
    await expect(writer.write({ metadata: "after" })).rejects.toMatchObject(told);
  });

  it("a send that fails tells the reading end why, in place of a closed pipe", async () => {
    const failing: ChannelContext = {
      ...checkedChannel(false),
      createChannel: (connections) => ({
        send: () => Promise.reject(new TensorPipeError(ErrorCode.SYSTEM, "the device went away under the send", { where: "checked channel" })),
        recv: () => new Promise(() => undefined),
        close: (error) => connections[0]!.close(error),
      }),
    };
    const { writer, reader } = await pair((server, client) => {
      server.registerChannel(5000, "checked", checkedChannel(false));
      client.registerChannel(5000, "checked", failing);
    });
    const reading = reader.readMessage();
    await expect(writer.write({ tensors: [{ buffer: new Uint8Array(64), targetDevice: CPU_DEVICE }] })).rejects.toMatchObject({ code: ErrorCode.SYSTEM });
    await expect(reading).rejects.toMatchObject({ code: ErrorCode.SYSTEM, message: expect.stringMatching(/^the peer failed the pipe: the device went away/) });
  });
});
