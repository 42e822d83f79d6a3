import { ErrorCode } from "@tensorpipe/core/backend";
import { describe, expect, it } from "vitest";
import {
  MAX_NICS,
  SETUP_BYTES,
  decodeDescriptor,
  decodeNicCount,
  decodeReadyToReceive,
  decodeSetup,
  encodeDescriptor,
  encodeNicCount,
  encodeReadyToReceive,
  encodeSetup,
} from "../src/wire.js";

const protocol = expect.objectContaining({ code: ErrorCode.PROTOCOL });
const setup = (qpn: number) => ({ lid: 7 + qpn, mtu: 5, qpn, maxMsgSize: 2 ** 31, gid: new Uint8Array(16).fill(qpn) });

describe("cuda-gdr control frames", () => {
  it("round-trip the handshake, descriptors and ready-to-receive", () => {
    expect(decodeNicCount(encodeNicCount(3))).toBe(3);
    const matrix = [
      [setup(1), setup(2), setup(3)],
      [setup(4), setup(5), setup(6)],
    ];
    const bytes = encodeSetup(matrix);
    expect(bytes.byteLength).toBe(8 + 6 * SETUP_BYTES);
    expect(decodeSetup(bytes, 2, 3)).toEqual(matrix);
    expect(decodeDescriptor(encodeDescriptor({ nic: 1, length: 2 ** 40 + 3 }), 2)).toEqual({ nic: 1, length: 2 ** 40 + 3 });
    expect(decodeReadyToReceive(encodeReadyToReceive(2), 3)).toBe(2);
  });

  it("refuse every truncation and every out-of-range field with ERR_TP_PROTOCOL", () => {
    const frames = [encodeNicCount(1), encodeSetup([[setup(1)]]), encodeDescriptor({ nic: 0, length: 5 }), encodeReadyToReceive(0)];
    const decoders = [
      (b: Uint8Array) => decodeNicCount(b),
      (b: Uint8Array) => decodeSetup(b, 1, 1),
      (b: Uint8Array) => decodeDescriptor(b, 1),
      (b: Uint8Array) => decodeReadyToReceive(b, 1),
    ];
    frames.forEach((frame, i) => {
      for (let n = 0; n < frame.byteLength; n++) expect(() => decoders[i]!(frame.subarray(0, n))).toThrow(protocol);
      expect(() => decoders[i]!(new Uint8Array([...frame, 0]))).toThrow(protocol);
    });
    expect(() => decodeNicCount(encodeNicCount(0))).toThrow(protocol);
    expect(() => decodeNicCount(encodeNicCount(MAX_NICS + 1))).toThrow(protocol);
    // A peer that would make us build 2^32 queue pairs never gets that far.
    expect(() => decodeNicCount(encodeNicCount(2 ** 32 - 1))).toThrow(protocol);
    expect(() => decodeSetup(encodeSetup([[setup(1)], [setup(2)]]), 1, 2)).toThrow(protocol);
    expect(() => decodeSetup(encodeSetup([[{ ...setup(1), mtu: 9 }]]), 1, 1)).toThrow(protocol);
    expect(() => decodeSetup(encodeSetup([[{ ...setup(1), maxMsgSize: 0 }]]), 1, 1)).toThrow(protocol);
    expect(() => decodeDescriptor(encodeDescriptor({ nic: 2, length: 1 }), 2)).toThrow(protocol);
    const huge = encodeDescriptor({ nic: 0, length: 0 });
    new DataView(huge.buffer).setBigUint64(4, 2n ** 63n, true);
    expect(() => decodeDescriptor(huge, 1)).toThrow(protocol);
    expect(() => decodeReadyToReceive(encodeReadyToReceive(1), 1)).toThrow(protocol);
  });
});
