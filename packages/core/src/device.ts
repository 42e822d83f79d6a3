import { ErrorCode, TensorPipeError } from "./errors.js";

/** Where a tensor lives: { type: "cpu", index: 0 }, { type: "cuda", index: 1 }. */
export interface Device {
  readonly type: string;
  readonly index: number;
}

export const CPU_DEVICE: Device = Object.freeze({ type: "cpu", index: 0 });

export function deviceKey(d: Device): string {
  return `${d.type}:${d.index}`;
}

export function sameDevice(a: Device, b: Device): boolean {
  return a.type === b.type && a.index === b.index;
}

/**
 * Memory on a device other than the CPU. Device backends (CUDA, ...) define
 * concrete buffer classes; core only needs the device and the size.
 */
export interface DeviceBuffer {
  readonly device: Device;
  readonly byteLength: number;
}

/** A tensor's memory: a TypedArray/DataView on the CPU or a device buffer. */
export type TensorBuffer = ArrayBufferView | DeviceBuffer;

export function isCpuBuffer(b: TensorBuffer): b is ArrayBufferView {
  return ArrayBuffer.isView(b);
}

export function bufferDevice(b: TensorBuffer): Device {
  return isCpuBuffer(b) ? CPU_DEVICE : b.device;
}

/**
 * The first `length` bytes of a CPU tensor, for channels that move CPU
 * memory only; any other device is an ERR_TP_INVALID_ARG naming the channel.
 */
export function cpuBytes(buffer: TensorBuffer, length: number, channel: string): Uint8Array {
  if (!isCpuBuffer(buffer)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `${channel} channel moves CPU memory only, got ${buffer.device.type}`);
  }
  return asBytes(buffer).subarray(0, length);
}

/** A byte view over the CPU memory of a TypedArray or DataView. */
export function asBytes(b: ArrayBufferView): Uint8Array {
  return b instanceof Uint8Array ? b : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}
