import { describe, expect, it } from "vitest";
import { CPU_DEVICE } from "../src/device.js";
import { ErrorCode } from "../src/errors.js";
import {
  type BrochureAnswer,
  decodeBrochure,
  decodeBrochureAnswer,
  decodePacket,
  encodeBrochure,
  encodeBrochureAnswer,
  encodePacket,
  MAX_HANDSHAKE_ENTRIES,
} from "../src/protocol/handshake.js";
import { decodeDescriptor, decodeDescriptorReply, encodeDescriptor, encodeDescriptorReply } from "../src/protocol/message.js";
import { upstreamSession } from "../src/testing/upstream-sessions.js";

const { clientMain, serverMain, clientReply: replyConnection, clientChannel } = upstreamSession("basic");
const edge = upstreamSession("edge");

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const cpu = CPU_DEVICE;
const basicDevices = () => new Map([["cpu:0", { device: cpu, descriptor: "any" }]]);

describe("upstream golden frames", () => {
  it("SpontaneousConnection with an empty context name", () => {
    expect(hex(encodePacket({ kind: "spontaneous", contextName: "" }))).toBe(hex(clientMain[0]!));
    expect(decodePacket(clientMain[0]!)).toEqual({ kind: "spontaneous", contextName: "" });
  });

  it("RequestedConnection for the reply connection (id 0) and the basic channel (id 1)", () => {
    expect(hex(encodePacket({ kind: "requested", registrationId: 0n }))).toBe(hex(replyConnection[0]!));
    expect(hex(encodePacket({ kind: "requested", registrationId: 1n }))).toBe(hex(clientChannel[0]!));
    expect(decodePacket(clientChannel[0]!)).toEqual({ kind: "requested", registrationId: 1n });
  });

  it("Brochure of a uv + basic context", () => {
    const brochure = {
      transportDomainDescriptors: new Map([["uv", "uv:*"]]),
      channelDeviceDescriptors: new Map([["basic", basicDevices()]]),
    };
    expect(hex(encodeBrochure(brochure))).toBe(hex(clientMain[1]!));
    expect(decodeBrochure(clientMain[1]!)).toEqual(brochure);
  });

  it("BrochureAnswer choosing uv and basic", () => {
    const answer: BrochureAnswer = {
      transport: "uv",
      address: "127.0.0.1:29777",
      transportRegistrationIds: new Map([[1, 0n]]),
      transportDomainDescriptor: "uv:*",
      channelRegistrationIds: new Map([["basic", [1n]]]),
      channelDeviceDescriptors: new Map([["basic", basicDevices()]]),
      channelForDevicePair: [{ local: cpu, remote: cpu, channel: "basic" }],
    };
    expect(hex(encodeBrochureAnswer(answer))).toBe(hex(serverMain[0]!));
    expect(decodeBrochureAnswer(serverMain[0]!)).toEqual(answer);
  });

  it("Descriptor of a message with metadata, a payload and a CPU tensor", () => {
    const sent = {
      metadata: "BBB",
      payloads: [{ length: 5, metadata: "" }],
      tensors: [{ length: 8, sourceDevice: cpu, targetDevice: cpu, metadata: "" }],
    };
    expect(hex(encodeDescriptor(sent))).toBe(hex(clientMain[2]!));
    expect(decodeDescriptor(clientMain[2]!)).toEqual(sent);
    const echoed = { ...sent, metadata: "" };
    expect(hex(encodeDescriptor(echoed))).toBe(hex(serverMain[1]!));
  });

  it("every descriptor frame of the capture decodes and re-encodes to the same bytes", () => {
    for (const frame of [...clientMain.slice(2), ...serverMain.slice(1)]) {
      if (frame.length === 5) continue; // payload
      expect(hex(encodeDescriptor(decodeDescriptor(frame)))).toBe(hex(frame));
    }
  });
});

describe("upstream golden frames: edge cases", () => {
  const tensor = (length: number, metadata: string, targetDevice?: typeof cpu) =>
    targetDevice ? { length, sourceDevice: cpu, targetDevice, metadata } : { length, sourceDevice: cpu, metadata };
  const zeroes = {
    metadata: "Z",
    payloads: [
      { length: 0, metadata: "p0" },
      { length: 3, metadata: "p1" },
    ],
    tensors: [tensor(0, "t2", cpu), tensor(5, "t3", cpu), tensor(0, "t4", cpu)],
  };
  const untargeted = { metadata: "R", payloads: [], tensors: [tensor(4, "t0")] };
  const empty = { metadata: "", payloads: [], tensors: [] };

  it("the client's descriptors: zero-length payloads and tensors, a tensor without a target, an empty message", () => {
    expect(hex(encodeDescriptor(zeroes))).toBe(hex(edge.clientMain[2]!));
    expect(edge.clientMain[3]!.length).toBe(0);
    expect(hex(encodeDescriptor(untargeted))).toBe(hex(edge.clientMain[5]!));
    expect(hex(encodeDescriptor(empty))).toBe(hex(edge.clientMain[6]!));
    expect(decodeDescriptor(edge.clientMain[2]!)).toEqual(zeroes);
    expect(decodeDescriptor(edge.clientMain[5]!)).toEqual(untargeted);
    expect(decodeDescriptor(edge.clientMain[6]!)).toEqual(empty);
  });

  it("the server's echoes name cpu:0 as every tensor's target", () => {
    expect(hex(encodeDescriptor(zeroes))).toBe(hex(edge.serverMain[1]!));
    expect(hex(encodeDescriptor({ ...untargeted, tensors: [tensor(4, "t0", cpu)] }))).toBe(hex(edge.serverMain[4]!));
    expect(hex(encodeDescriptor(empty))).toBe(hex(edge.serverMain[5]!));
  });

  it("the DescriptorReply names the one tensor that had no target", () => {
    expect(edge.serverReply).toHaveLength(1);
    expect(hex(encodeDescriptorReply({ targetDevices: [cpu] }))).toBe(hex(edge.serverReply[0]!));
  });

  it("the basic channel carries only the tensors that have bytes", () => {
    expect(edge.clientChannel.slice(1).map((f) => f.length)).toEqual([5, 4]);
    expect(edge.serverChannel.map((f) => f.length)).toEqual([5, 4]);
  });

  it("the BrochureAnswer has the same shape as in the first session", () => {
    const answer = decodeBrochureAnswer(edge.serverMain[0]!);
    expect(answer.address).toBe(`127.0.0.1:${edge.serverPort}`);
    expect(hex(encodeBrochureAnswer({ ...answer, address: "127.0.0.1:29777" }))).toBe(hex(serverMain[0]!));
  });
});

describe("DescriptorReply and other forms", () => {
  it("round-trips a DescriptorReply with the layout upstream uses", () => {
    const bytes = encodeDescriptorReply({ targetDevices: [cpu, { type: "cuda", index: 3 }] });
    expect(hex(bytes)).toBe("b901ba02b902bd0363707500b902bd046375646103");
    expect(decodeDescriptorReply(bytes)).toEqual({ targetDevices: [cpu, { type: "cuda", index: 3 }] });
  });

  it("encodes a tensor without a target device as an empty optional", () => {
    const d = { metadata: "", payloads: [], tensors: [{ length: 300, sourceDevice: cpu, metadata: "x" }] };
    const bytes = encodeDescriptor(d);
    expect(hex(bytes)).toBe("b903bd00ba00ba01b90481" + "2c01" + "b902bd0363707500" + "be" + "bd0178");
    expect(decodeDescriptor(bytes)).toEqual(d);
  });
});

describe("decoding hostile bytes", () => {
  const bad = (what: string, bytes: number[], decode: (b: Uint8Array) => unknown) =>
    it(what, () => {
      expect(() => decode(Uint8Array.from(bytes))).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
    });

  bad("empty input", [], decodePacket);
  bad("unknown packet variant", [0xb8, 0x02, 0xb9, 0x01, 0x00], decodePacket);
  bad("trailing bytes", [0xb8, 0x01, 0xb9, 0x01, 0x00, 0x00], decodePacket);
  bad("wrong member count", [0xb8, 0x01, 0xb9, 0x02, 0x00], decodePacket);
  bad("string longer than the frame", [0xb8, 0x00, 0xb9, 0x01, 0xbd, 0x83, 0, 0, 0, 0, 0, 0, 0, 0x40], decodePacket);
  bad("array count of 2^62", [0xb9, 0x01, 0xba, 0x83, 0, 0, 0, 0, 0, 0, 0, 0x40], decodeDescriptorReply);
  bad("map count larger than the bytes left", [0xb9, 0x02, 0xbb, 0x7f, 0xbd, 0x00], decodeBrochure);
  bad("signed field with an unsigned prefix", [0xb9, 0x01, 0xba, 0x01, 0xb9, 0x02, 0xbd, 0x00, 0x80, 0x05], decodeDescriptorReply);
  bad("64-bit form for a 32-bit device index", [0xb9, 0x01, 0xba, 0x01, 0xb9, 0x02, 0xbd, 0x00, 0x87, 0, 0, 0, 0, 0, 0, 0, 0], decodeDescriptorReply);
  bad("invalid UTF-8 in a string", [0xb8, 0x00, 0xb9, 0x01, 0xbd, 0x01, 0xff], decodePacket);
  bad(
    "vector<uint64> of 7 bytes",
    [0xb9, 0x07, 0xbd, 0x00, 0xbd, 0x00, 0xbb, 0x00, 0xbd, 0x00, 0xbb, 0x01, 0xbd, 0x00, 0xbc, 0x07, 1, 2, 3, 4, 5, 6, 7],
    decodeBrochureAnswer,
  );

  it("reads registration ids of all 64 bits (ours are random)", () => {
    const id = 2n ** 64n - 3n;
    expect(decodePacket(encodePacket({ kind: "requested", registrationId: id }))).toEqual({ kind: "requested", registrationId: id });
  });

  it("rejects every truncation of every captured frame", () => {
    const decoders = [decodePacket, decodeBrochure, decodeBrochureAnswer, decodeDescriptor, decodeDescriptorReply];
    for (const frame of [...clientMain, ...serverMain, ...edge.clientMain, ...edge.serverMain, ...edge.serverReply]) {
      for (let cut = 0; cut < frame.length; cut++) {
        for (const decode of decoders) {
          expect(() => decode(frame.subarray(0, cut))).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
        }
      }
    }
  });
});

describe("handshake entry limits", () => {
  const devices = (n: number) => new Map(Array.from({ length: n }, (_, i) => [`cpu:${i}`, { device: { type: "cpu", index: i }, descriptor: "" }]));
  const brochure = (n: number) =>
    encodeBrochure({ transportDomainDescriptors: new Map([["uv", "uv:*"]]), channelDeviceDescriptors: new Map([["basic", devices(n)]]) });

  it(`takes a brochure of ${MAX_HANDSHAKE_ENTRIES} entries, and refuses one more before making anything of it`, () => {
    // One transport, one channel: the rest are devices.
    expect(decodeBrochure(brochure(MAX_HANDSHAKE_ENTRIES - 2)).channelDeviceDescriptors.get("basic")!.size).toBe(MAX_HANDSHAKE_ENTRIES - 2);
    expect(() => decodeBrochure(brochure(MAX_HANDSHAKE_ENTRIES - 1))).toThrow(
      expect.objectContaining({ code: ErrorCode.PROTOCOL, message: expect.stringContaining(`more than ${MAX_HANDSHAKE_ENTRIES} entries`) }),
    );
  });

  it("refuses an answer asking for more connections than the bound", () => {
    const answer: BrochureAnswer = {
      transport: "uv",
      address: "127.0.0.1:1",
      transportRegistrationIds: new Map([[1, 1n]]),
      transportDomainDescriptor: "",
      channelRegistrationIds: new Map([["mpt", Array.from({ length: MAX_HANDSHAKE_ENTRIES }, (_, i) => BigInt(i))]]),
      channelDeviceDescriptors: new Map(),
      channelForDevicePair: [],
    };
    expect(() => decodeBrochureAnswer(encodeBrochureAnswer(answer))).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
    answer.channelRegistrationIds.set("mpt", [1n, 2n]);
    expect(decodeBrochureAnswer(encodeBrochureAnswer(answer)).channelRegistrationIds.get("mpt")).toEqual([1n, 2n]);
  });
});

describe("descriptor limits", () => {
  /** A descriptor of `payloads` empty payloads and `tensors` CPU tensors of `tensorLength` bytes each. */
  const announcing = (payloads: number, tensors = 0, tensorLength = 0) =>
    encodeDescriptor({
      metadata: "",
      payloads: Array.from({ length: payloads }, () => ({ length: 0, metadata: "" })),
      tensors: Array.from({ length: tensors }, () => ({ length: tensorLength, sourceDevice: cpu, metadata: "" })),
    });
  const limits = { maxPayloads: 100, maxTensors: 10, maxMessageBytes: 1000 };

  it("takes a descriptor at its limits", () => {
    expect(decodeDescriptor(announcing(100, 10, 100), limits).tensors).toHaveLength(10);
  });

  it.each([
    ["payloads", announcing(101), /101 payloads, over the limit of 100 \(raise ContextOptions.maxPayloads/],
    ["tensors", announcing(0, 11), /11 tensors, over the limit of 10 \(raise ContextOptions.maxTensors/],
    ["bytes", announcing(0, 10, 101), /over the limit of 1000 \(raise ContextOptions.maxMessageBytes/],
  ])("refuses too many %s, naming the option", (_, bytes, message) => {
    expect(() => decodeDescriptor(bytes, limits)).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL, message: expect.stringMatching(message) }));
  });

  it("refuses a million announced payloads by their count, before decoding one", () => {
    const hostile = announcing(1_000_000);
    const t0 = performance.now();
    expect(() => decodeDescriptor(hostile)).toThrow(expect.objectContaining({ message: expect.stringMatching(/maxPayloads/) }));
    expect(performance.now() - t0).toBeLessThan(50);
  });
});
