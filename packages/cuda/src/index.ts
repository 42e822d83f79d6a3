/**
 * GPU memory through the CUDA driver, loaded at first use: for users
 * without another GPU framework, and for the CUDA channels. Every call on a
 * machine without a driver or a GPU fails with ERR_TP_NOT_VIABLE saying
 * why; `cudaViability()` says it without throwing.
 *
 * Copies and fills go on their stream in the order called, and are on it
 * when the call returns (those with pageable host memory excepted: they
 * are queued from libuv's pool, and what follows them on their stream
 * waits there too); each settles once its own work is done.
 */
import {
  type CudaBuffer,
  ErrorCode,
  type TensorBuffer,
  bufferDevice,
  isCudaBuffer,
  TensorPipeError,
  VIABLE,
  type Viability,
  cudaBuffer,
  fromNativeError,
  notViable,
} from "@tensorpipe/core/backend";
import { type CudaAllocation, type CudaDeviceInfo, type NativeAddon, loadAddon } from "./native.js";

export type { CudaAllocation, CudaDeviceInfo } from "./native.js";

/** What the CUDA driver says of this machine. */
export interface CudaInfo {
  /** Whether CUDA works here, and if not why. */
  viability: Viability;
  /** The driver's CUDA version, e.g. 13000 for 13.0. */
  driverVersion?: number;
  /** The GPUs. */
  devices: CudaDeviceInfo[];
}

let info: CudaInfo | undefined;

/** The driver and the GPUs it sees, probed once. */
export function cudaInfo(): CudaInfo {
  if (info) return info;
  const { addon, error } = loadAddon();
  if (!addon) {
    info = { viability: notViable(`the cuda addon did not load: ${error?.message}`), devices: [] };
    return info;
  }
  const probe = addon.probe();
  info = {
    viability: probe.reason === null ? VIABLE : notViable(probe.reason),
    driverVersion: probe.driverVersion,
    devices: probe.devices,
  };
  return info;
}

/** Whether CUDA works here, and if not why (cudaInfo().viability). */
export function cudaViability(): Viability {
  return cudaInfo().viability;
}

function need(): NativeAddon {
  const viability = cudaViability();
  if (!viability.viable) throw new TensorPipeError(ErrorCode.NOT_VIABLE, `CUDA is not usable here: ${viability.reason}`);
  return loadAddon().addon!;
}

function checkDevice(device: number): void {
  const count = cudaInfo().devices.length;
  if (!Number.isInteger(device) || device < 0 || device >= count) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `no GPU ${device} here (${count} visible)`);
  }
}

function call<T>(what: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw fromNativeError(e, what);
  }
}

/** `byteLength` bytes of memory on GPU `device` (default 0); give it back with freeCuda. */
export function allocateCuda(byteLength: number, options: { device?: number } = {}): CudaBuffer {
  const device = options.device ?? 0;
  const addon = need();
  checkDevice(device);
  return cudaBuffer(
    call("cuda allocate", () => addon.alloc(device, byteLength)),
    byteLength,
    { device },
  );
}

/** Frees memory allocated with allocateCuda(). */
export function freeCuda(buffer: CudaBuffer): void {
  const addon = need();
  call("cuda free", () => addon.free(buffer.device.index, buffer.ptr));
}

/**
 * Page-locked host memory of `byteLength` bytes, which the GPU copies to
 * and from at full speed; freed when the array is collected.
 */
export function pinnedHostBuffer(byteLength: number): Uint8Array {
  const addon = need();
  return new Uint8Array(call("cuda pinned allocation", () => addon.allocHost(byteLength)));
}

/** The GPU a device pointer belongs to, or -1 when it is none of theirs. */
export function pointerDevice(ptr: bigint): number {
  return need().pointerDevice(ptr);
}

/** The allocation (base, size, the driver's id for it) that holds `buffer`'s memory. */
export function allocationOf(buffer: CudaBuffer): CudaAllocation {
  const addon = need();
  return call("cuda allocation", () => addon.allocationOf(buffer.device.index, buffer.ptr));
}

/**
 * Settles once the work queued so far on `stream` (default: the legacy
 * default stream) of GPU `device` is done; work queued later is not waited for.
 */
export function streamReady(stream = 0n, device = 0): Promise<void> {
  try {
    need();
    checkDevice(device);
    return copy("ready", device, 0n, 0n, 0, stream);
  } catch (e) {
    return Promise.reject(e);
  }
}

/** A stream on GPU `device` that does not wait for the legacy default stream. */
export function createStream(device = 0): bigint {
  const addon = need();
  checkDevice(device);
  return call("cuda stream", () => addon.streamCreate(device));
}

/** Destroys a stream made with createStream(). */
export function destroyStream(stream: bigint, device = 0): void {
  const addon = need();
  call("cuda stream", () => addon.streamDestroy(device, stream));
}

/** Options of the copies. */
export interface CopyOptions {
  /** The stream to copy on (default: the buffer's, else the legacy default stream). */
  stream?: bigint;
}

function copy(
  kind: "htod" | "dtoh" | "dtod" | "fill" | "ready",
  device: number,
  dst: bigint | ArrayBufferView,
  src: bigint | ArrayBufferView | number,
  bytes: number,
  stream: bigint,
): Promise<void> {
  const addon = need();
  return new Promise((resolve, reject) => {
    try {
      addon.copy(kind, device, dst, src, bytes, stream, (err) => (err ? reject(fromNativeError(err, `cuda ${kind} copy`)) : resolve()));
    } catch (e) {
      reject(fromNativeError(e, `cuda ${kind} copy`));
    }
  });
}

function checkLength(what: string, length: number, ...limits: number[]): void {
  if (!Number.isInteger(length) || length < 0 || limits.some((l) => length > l)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `${what}: ${length} bytes do not fit (${limits.join(", ")})`);
  }
}

/** Copies `src` (host memory) to the start of `dst`; settles once the bytes are there. */
export function copyToDevice(dst: CudaBuffer, src: ArrayBufferView, options: CopyOptions = {}): Promise<void> {
  try {
    checkLength("copyToDevice", src.byteLength, dst.byteLength);
    return copy("htod", dst.device.index, dst.ptr, src, src.byteLength, options.stream ?? dst.stream ?? 0n);
  } catch (e) {
    return Promise.reject(e);
  }
}

/** Copies the first dst.byteLength bytes of `src` into `dst` (host memory). */
export function copyToHost(dst: ArrayBufferView, src: CudaBuffer, options: CopyOptions = {}): Promise<void> {
  try {
    checkLength("copyToHost", dst.byteLength, src.byteLength);
    return copy("dtoh", src.device.index, dst, src.ptr, dst.byteLength, options.stream ?? src.stream ?? 0n);
  } catch (e) {
    return Promise.reject(e);
  }
}

/** Copies `byteLength` bytes from `src` to `dst`, on the GPU(s). */
export function copyOnDevice(dst: CudaBuffer, src: CudaBuffer, byteLength: number, options: CopyOptions = {}): Promise<void> {
  try {
    checkLength("copyOnDevice", byteLength, dst.byteLength, src.byteLength);
    return copy("dtod", dst.device.index, dst.ptr, src.ptr, byteLength, options.stream ?? dst.stream ?? 0n);
  } catch (e) {
    return Promise.reject(e);
  }
}

/** Sets the first `byteLength` bytes of `dst` to `value`. */
export function fillDevice(dst: CudaBuffer, value: number, byteLength = dst.byteLength, options: CopyOptions = {}): Promise<void> {
  try {
    checkLength("fillDevice", byteLength, dst.byteLength);
    return copy("fill", dst.device.index, dst.ptr, value & 0xff, byteLength, options.stream ?? dst.stream ?? 0n);
  } catch (e) {
    return Promise.reject(e);
  }
}

/** A view of `length` bytes of `buffer` from `offset` (same GPU, same stream). */
export function cudaSlice(buffer: CudaBuffer, offset: number, length: number): CudaBuffer {
  checkLength("cudaSlice", offset + length, buffer.byteLength);
  return cudaBuffer(buffer.ptr + BigInt(offset), length, { device: buffer.device.index, stream: buffer.stream });
}

/**
 * The GPU buffer of a tensor of `length` bytes, for channels that move GPU
 * memory only; anything else is an ERR_TP_INVALID_ARG naming the channel.
 */
export function cudaTensor(buffer: TensorBuffer, length: number, channel: string): CudaBuffer {
  if (!isCudaBuffer(buffer)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `${channel} channel moves GPU memory only, got ${bufferDevice(buffer).type}`);
  }
  if (length > buffer.byteLength) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `${channel}: ${length} bytes do not fit a GPU buffer of ${buffer.byteLength}`);
  }
  return buffer;
}
