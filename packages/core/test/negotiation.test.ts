import { describe, expect, it } from "vitest";
import type { ChannelContext, DeviceDescriptor } from "../src/channel.js";
import type { Device } from "../src/device.js";
import { Context } from "../src/context.js";
import { ErrorCode } from "../src/errors.js";
import { WIRE_EXTENSIONS_ENTRY, readExtensions } from "../src/handshake/extensions.js";
import { buildBrochure, byPriority, checkAnswer, chooseChannels, chooseTransport } from "../src/negotiation.js";

const peerWireExtension = (channels: Parameters<typeof readExtensions>[0], name: string) => readExtensions(channels).wire.get(name);
import type { Brochure, BrochureAnswer } from "../src/protocol/handshake.js";
import type { TransportContext } from "../src/transport.js";
import { notViable, VIABLE } from "../src/viability.js";

const cpu: Device = { type: "cpu", index: 0 };
const gpu = (index: number): Device => ({ type: "cuda", index });

function transport(domain: string, viable = true): TransportContext {
  return {
    isViable: () => (viable ? VIABLE : notViable("test says no")),
    domainDescriptor: () => domain,
    listen: () => Promise.reject(new Error("unused")),
    connect: () => Promise.reject(new Error("unused")),
    close: async () => {},
  };
}

function channel(devices: DeviceDescriptor[], connections = 1, viable = true): ChannelContext {
  return {
    isViable: () => (viable ? VIABLE : notViable("test says no")),
    deviceDescriptors: () => devices,
    numConnectionsNeeded: () => connections,
    canCommunicateWithRemote: (a, b) => a === b,
    createChannel: () => {
      throw new Error("unused");
    },
    close: async () => {},
  };
}

const brochureOf = (t: Record<string, string>, c: Record<string, DeviceDescriptor[]>): Brochure => ({
  transportDomainDescriptors: new Map(Object.entries(t)),
  channelDeviceDescriptors: new Map(Object.entries(c).map(([name, ds]) => [name, new Map(ds.map((d) => [`${d.device.type}:${d.device.index}`, d]))])),
});

describe("transport choice", () => {
  const transports = byPriority([
    { priority: 1, name: "uv", context: transport("uv:*") },
    { priority: 10, name: "shm", context: transport("machine-a") },
  ]);

  it("takes the highest priority transport both have with equal domains", () => {
    const b = brochureOf({ uv: "uv:*", shm: "machine-a" }, {});
    expect(chooseTransport(transports, new Set(["uv", "shm"]), b)?.name).toBe("shm");
  });

  it("falls back when the domains differ or the listener does not listen on it", () => {
    expect(chooseTransport(transports, new Set(["uv", "shm"]), brochureOf({ uv: "uv:*", shm: "machine-b" }, {}))?.name).toBe("uv");
    expect(chooseTransport(transports, new Set(["uv"]), brochureOf({ uv: "uv:*", shm: "machine-a" }, {}))?.name).toBe("uv");
  });

  it("finds nothing when there is nothing in common", () => {
    expect(chooseTransport(transports, new Set(["uv", "shm"]), brochureOf({ ibv: "x" }, {}))).toBeUndefined();
  });

  it("leaves non-viable backends out of the brochure", () => {
    const b = buildBrochure(
      [
        { priority: 0, name: "uv", context: transport("uv:*") },
        { priority: 1, name: "x", context: transport("d", false) },
      ],
      [{ priority: 0, name: "c", context: channel([], 1, false) }],
    );
    expect([...b.transportDomainDescriptors.keys()]).toEqual(["uv"]);
    expect(b.channelDeviceDescriptors.size).toBe(0);
  });
});

describe("wire extensions", () => {
  const extended = (extension: string | undefined, viable = true): ChannelContext => ({
    ...channel([{ device: cpu, descriptor: "host-1" }], 2, viable),
    wireExtension: () => extension,
  });

  it("travel in an entry of their own only when a viable channel has one, so that a brochure of upstream's channels stays upstream's bytes", () => {
    const plain = buildBrochure([], [{ priority: 0, name: "basic", context: channel([{ device: cpu, descriptor: "any" }]) }]);
    expect([...plain.channelDeviceDescriptors.keys()]).toEqual(["basic"]);
    const none = buildBrochure(
      [],
      [
        { priority: 0, name: "cma", context: extended(undefined) },
        { priority: 1, name: "x", context: extended("v", false) },
      ],
    );
    expect([...none.channelDeviceDescriptors.keys()]).toEqual(["cma"]);
    const b = buildBrochure([], [{ priority: 0, name: "cma", context: extended("inline:auto") }]);
    expect([...b.channelDeviceDescriptors.keys()]).toEqual(["cma", WIRE_EXTENSIONS_ENTRY]);
    expect(peerWireExtension(b.channelDeviceDescriptors, "cma")).toBe("inline:auto");
    expect(peerWireExtension(b.channelDeviceDescriptors, "basic")).toBeUndefined();
  });

  it("are registered only at a priority that is a number, under a name that can be one", async () => {
    const context = new Context();
    for (const priority of ["100", Number.NaN, Number.POSITIVE_INFINITY, undefined]) {
      expect(() => context.registerChannel(priority as never, "c", extended("v"))).toThrow(
        expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(/the priority of "c" must be a finite number/) }),
      );
    }
    expect(() => context.registerChannel(1, "a\u001bb", extended("v"))).toThrow(
      expect.objectContaining({ message: 'backend name "a\\u001bb" must be [A-Za-z0-9_.-]+' }),
    );
    expect(context.backends()).toEqual([]);
    await context.close();
  });

  it("are carried under a name no backend may take", async () => {
    const context = new Context();
    for (const name of [WIRE_EXTENSIONS_ENTRY, "tensorpipe-js.auth.hmac-sha256", "tensorpipe-js.x"]) {
      expect(() => context.registerChannel(0, name, extended("v")), name).toThrow(
        expect.objectContaining({ code: ErrorCode.INVALID_ARG, message: expect.stringMatching(/tensorpipe-js\.\* names are the handshake's own entries/) }),
      );
      expect(() => context.registerTransport(0, name, transport("d")), name).toThrow(expect.objectContaining({ code: ErrorCode.INVALID_ARG }));
    }
    await context.close();
  });

  it("are no channel to choose, and the listener answers with those of the channels it chose", () => {
    const channels = byPriority([{ priority: 0, name: "cma", context: extended("inline:1024") }]);
    const brochure = buildBrochure([], channels);
    const choice = chooseChannels(channels, brochure);
    expect(choice.selected.map((c) => c.name)).toEqual(["cma"]);
    expect(choice.pairs.map((p) => p.channel)).toEqual(["cma"]);
    expect(peerWireExtension(choice.deviceDescriptors, "cma")).toBe("inline:1024");
  });
});

describe("channel choice", () => {
  const channels = byPriority([
    { priority: 0, name: "basic", context: channel([{ device: cpu, descriptor: "any" }]) },
    { priority: 5, name: "cma", context: channel([{ device: cpu, descriptor: "host-1" }], 2) },
    {
      priority: 9,
      name: "cuda_ipc",
      context: channel([
        { device: gpu(0), descriptor: "gpu-a" },
        { device: gpu(1), descriptor: "gpu-b" },
      ]),
    },
  ]);

  it("gives each device pair the best channel whose descriptors match", () => {
    const b = brochureOf(
      {},
      {
        basic: [{ device: cpu, descriptor: "any" }],
        cma: [{ device: cpu, descriptor: "host-1" }],
        cuda_ipc: [{ device: gpu(0), descriptor: "gpu-b" }],
      },
    );
    const choice = chooseChannels(channels, b);
    expect(choice.pairs).toEqual([
      { local: gpu(1), remote: gpu(0), channel: "cuda_ipc" },
      { local: cpu, remote: cpu, channel: "cma" },
    ]);
    expect(choice.selected.map((c) => c.name)).toEqual(["cuda_ipc", "cma"]);
  });

  it("falls back to basic on another machine", () => {
    const b = brochureOf({}, { basic: [{ device: cpu, descriptor: "any" }], cma: [{ device: cpu, descriptor: "host-2" }] });
    expect(chooseChannels(channels, b).pairs).toEqual([{ local: cpu, remote: cpu, channel: "basic" }]);
  });
});

describe("checking the answer on the connecting side", () => {
  const transports = new Map([["uv", transport("uv:*")]]);
  const channels = new Map([["basic", channel([{ device: cpu, descriptor: "any" }])]]);
  const answer = (over: Partial<BrochureAnswer>): BrochureAnswer => ({
    transport: "uv",
    address: "127.0.0.1:1",
    transportRegistrationIds: new Map([[1, 0n]]),
    transportDomainDescriptor: "uv:*",
    channelRegistrationIds: new Map([["basic", [1n]]]),
    channelDeviceDescriptors: new Map([["basic", new Map([["cpu:0", { device: cpu, descriptor: "any" }]])]]),
    channelForDevicePair: [{ local: cpu, remote: cpu, channel: "basic" }],
    ...over,
  });

  it("accepts a consistent answer and reverses the pairs", () => {
    expect(checkAnswer(transports, channels, answer({}))).toEqual([{ local: cpu, remote: cpu, channel: "basic" }]);
  });

  it.each([
    ["an unknown transport", { transport: "shm" }],
    ["a different domain", { transportDomainDescriptor: "other" }],
    ["an unknown channel", { channelForDevicePair: [{ local: cpu, remote: cpu, channel: "cma" }] }],
    ["mismatched descriptors", { channelDeviceDescriptors: new Map([["basic", new Map([["cpu:0", { device: cpu, descriptor: "x" }]])]]) }],
    ["the wrong number of connections", { channelRegistrationIds: new Map([["basic", [1n, 2n]]]) }],
  ])("refuses %s", (_, over) => {
    expect(() => checkAnswer(transports, channels, answer(over as Partial<BrochureAnswer>))).toThrow(expect.objectContaining({ code: ErrorCode.NEGOTIATION }));
  });
});
