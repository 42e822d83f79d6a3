import { describe, expect, it } from "vitest";
import { CPU_DEVICE } from "../src/device.js";
import { ErrorCode } from "../src/errors.js";
import {
  type BrochureAnswer,
  decodeBrochure,
  decodeBrochureAnswer,
  decodeDescriptor,
  decodeDescriptorReply,
  decodePacket,
  encodeBrochure,
  encodeBrochureAnswer,
  encodeDescriptor,
  encodeDescriptorReply,
  encodePacket,
} from "../src/protocol.js";
import { clientChannel, clientMain, replyConnection, serverMain } from "./golden.js";

const hex = (b: Uint8Array) => Buffer.from(b).toString("hex");
const cpu = CPU_DEVICE;
const basicDevices = () => new Map([["cpu:0", { device: cpu, descriptor: "any" }]]);

describe("upstream golden frames", () => {
  it("SpontaneousConnection with an empty context name", () => {
    expect(hex(encodePacket({ kind: "spontaneous", contextName: "" }))).toBe(hex(clientMain[0]!));
    expect(decodePacket(clientMain[0]!)).toEqual({ kind: "spontaneous", contextName: "" });
  });

  it("RequestedConnection for the reply connection (id 0) and the basic channel (id 1)", () => {
    expect(hex(encodePacket({ kind: "requested", registrationId: 0 }))).toBe(hex(replyConnection[0]!));
    expect(hex(encodePacket({ kind: "requested", registrationId: 1 }))).toBe(hex(clientChannel[0]!));
    expect(decodePacket(clientChannel[0]!)).toEqual({ kind: "requested", registrationId: 1 });
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
      transportRegistrationIds: new Map([[1, 0]]),
      transportDomainDescriptor: "uv:*",
      channelRegistrationIds: new Map([["basic", [1]]]),
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
  bad("registration id beyond 2^53", [0xb8, 0x01, 0xb9, 0x01, 0x83, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff], decodePacket);
  bad("array count of 2^62", [0xb9, 0x01, 0xba, 0x83, 0, 0, 0, 0, 0, 0, 0, 0x40], decodeDescriptorReply);
  bad("map count larger than the bytes left", [0xb9, 0x02, 0xbb, 0x7f, 0xbd, 0x00], decodeBrochure);
  bad("signed field with an unsigned prefix", [0xb9, 0x01, 0xba, 0x01, 0xb9, 0x02, 0xbd, 0x00, 0x80, 0x05], decodeDescriptorReply);
  bad("64-bit form for a 32-bit device index", [0xb9, 0x01, 0xba, 0x01, 0xb9, 0x02, 0xbd, 0x00, 0x87, 0, 0, 0, 0, 0, 0, 0, 0], decodeDescriptorReply);
  bad("invalid UTF-8 in a string", [0xb8, 0x00, 0xb9, 0x01, 0xbd, 0x01, 0xff], decodePacket);
  bad("vector<uint64> of 7 bytes", [0xb9, 0x07, 0xbd, 0x00, 0xbd, 0x00, 0xbb, 0x00, 0xbd, 0x00, 0xbb, 0x01, 0xbd, 0x00, 0xbc, 0x07, 1, 2, 3, 4, 5, 6, 7], decodeBrochureAnswer);

  it("rejects every truncation of every captured frame", () => {
    const decoders = [decodePacket, decodeBrochure, decodeBrochureAnswer, decodeDescriptor];
    for (const frame of [...clientMain, ...serverMain]) {
      for (let cut = 0; cut < frame.length; cut++) {
        for (const decode of decoders) {
          expect(() => decode(frame.subarray(0, cut))).toThrow(expect.objectContaining({ code: ErrorCode.PROTOCOL }));
        }
      }
    }
  });
});
