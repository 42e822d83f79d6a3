import { ErrorCode, TensorPipeError } from "./errors.js";

/** Where a tensor lives: { type: "cpu", index: 0 }, { type: "cuda", index: 1 }. */
export interface Device {
  /** "cpu", "cuda", or another backend's device type. */
  readonly type: string;
  /** Which device of that type (0 for the CPU). */
  readonly index: number;
}

/** The CPU: host memory, ArrayBufferViews. */
export const CPU_DEVICE: Device = Object.freeze({ type: "cpu", index: 0 });

/** A device as a string key, "cpu:0" or "cuda:1". */
export function deviceKey(d: Device): string {
  return `${d.type}:${d.index}`;
}

/** A device pair in words, this side's first: "cpu:0->cuda:1". */
export function pairLabel(local: Device, remote: Device): string {
  return `${deviceKey(local)}->${deviceKey(remote)}`;
}

/** Whether two devices are the same one. */
export function sameDevice(a: Device, b: Device): boolean {
  return a.type === b.type && a.index === b.index;
}

/**
 * Memory on a device other than the CPU. Device backends (CUDA, ...) define
 * concrete buffer classes; core only needs the device and the size.
 */
export interface DeviceBuffer {
  /** The device the memory is on. */
  readonly device: Device;
  /** Its size in bytes. */
  readonly byteLength: number;
}

/**
 * Memory on an NVIDIA GPU, as the CUDA channels take it: the device's
 * index, the device pointer and, optionally, the stream whose work must
 * finish before the memory is read or after which it may be used (0n or
 * none: the legacy default stream). The memory is the caller's: nothing
 * here allocates or frees it.
 */
export interface CudaBuffer extends DeviceBuffer {
  /** The GPU the memory is on. */
  readonly device: Device & {
    /** Always "cuda". */
    readonly type: "cuda";
  };
  /** The device pointer. */
  readonly ptr: bigint;
  /** The CUDA stream the memory is ordered on (a cudaStream_t as a bigint). */
  readonly stream?: bigint;
}

/** A CudaBuffer over `byteLength` bytes at `ptr` on GPU `device` (default 0). */
export function cudaBuffer(ptr: bigint, byteLength: number, options: { device?: number; stream?: bigint } = {}): CudaBuffer {
  const index = options.device ?? 0;
  if (typeof ptr !== "bigint" || ptr < 0n || ptr >= 2n ** 64n) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `a CUDA device pointer is a bigint in [0, 2^64), got ${String(ptr)}`);
  }
  if (!Number.isSafeInteger(byteLength) || byteLength < 0) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `byteLength must be a non-negative integer, got ${byteLength}`);
  }
  if (!Number.isInteger(index) || index < 0) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `a CUDA device index is a non-negative integer, got ${index}`);
  }
  if (options.stream !== undefined && (typeof options.stream !== "bigint" || options.stream < 0n)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `a CUDA stream is a non-negative bigint handle, got ${String(options.stream)}`);
  }
  return Object.freeze({
    device: Object.freeze({ type: "cuda" as const, index }),
    ptr,
    byteLength,
    ...(options.stream !== undefined ? { stream: options.stream } : {}),
  });
}

/** Whether `b` is a CudaBuffer. */
export function isCudaBuffer(b: TensorBuffer): b is CudaBuffer {
  return !isCpuBuffer(b) && b.device.type === "cuda" && typeof (b as CudaBuffer).ptr === "bigint";
}

/** A tensor's memory: a TypedArray/DataView on the CPU or a device buffer. */
export type TensorBuffer = ArrayBufferView | DeviceBuffer;

/** Whether `b` is CPU memory (an ArrayBufferView). */
export function isCpuBuffer(b: TensorBuffer): b is ArrayBufferView {
  return ArrayBuffer.isView(b);
}

/** The device `b` is on. */
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
  const bytes = asBytes(buffer);
  return bytes.byteLength === length ? bytes : bytes.subarray(0, length);
}

/** A byte view over the CPU memory of a TypedArray or DataView. */
export function asBytes(b: ArrayBufferView): Uint8Array {
  return b instanceof Uint8Array ? b : new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}
