/**
 * What write() says of a message it cannot send, and read() of memory it
 * cannot fill: which part is wrong, what it got, and how to fix it
 * (ERR_TP_INVALID_ARG), instead of a TypeError from deep inside. The checks
 * themselves are the cheap ones write() makes anyway; the words are built
 * only for a message that fails them.
 */
import { describeValue } from "./describe-value.js";
import type { Device, DeviceBuffer } from "./device.js";
import { ErrorCode, TensorPipeError } from "./errors.js";
import type { Allocation } from "./message.js";

function invalid(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.INVALID_ARG, message);
}

/** How to turn what was given into memory the library takes. */
function fix(value: unknown): string {
  if (value instanceof ArrayBuffer || (typeof SharedArrayBuffer !== "undefined" && value instanceof SharedArrayBuffer)) {
    return ": wrap it in new Uint8Array(...)";
  }
  if (Array.isArray(value)) return ": make it a TypedArray, e.g. new Float32Array(values)";
  return "";
}

/** Throws unless `message` is an object whose parts are of the right kinds. */
export function checkMessageShape(message: unknown): void {
  if (typeof message !== "object" || message === null || Array.isArray(message)) {
    throw invalid(`write() takes a message object { metadata?, payloads?, tensors? }, got ${describeValue(message)}`);
  }
  const m = message as { metadata?: unknown; payloads?: unknown; tensors?: unknown };
  if (m.metadata !== undefined && typeof m.metadata !== "string") throw invalid(`metadata must be a string, got ${describeValue(m.metadata)}`);
  if (m.payloads !== undefined && !Array.isArray(m.payloads)) {
    throw invalid(`payloads must be an array of { data, metadata? }, got ${describeValue(m.payloads)}`);
  }
  if (m.tensors !== undefined && !Array.isArray(m.tensors)) {
    throw invalid(`tensors must be an array of { buffer, length?, targetDevice?, metadata? }, got ${describeValue(m.tensors)}`);
  }
}

/** The object each part is, in a message (write) and in an allocation (read). */
const SHAPES = {
  payload: { message: "{ data, metadata? }", allocation: "{ data }" },
  tensor: { message: "{ buffer, length?, targetDevice?, metadata? }", allocation: "{ buffer }" },
} as const;

/** How part `i` of a message, or of an allocation that needs `length` bytes there, is named in an error. */
function part(kind: "payload" | "tensor", i: number, length: number | undefined): { name: string; shape: string; size: string } {
  if (length === undefined) return { name: `${kind} ${i}`, shape: SHAPES[kind].message, size: "" };
  return { name: `allocation ${kind} ${i}`, shape: SHAPES[kind].allocation, size: ` of ${kind === "tensor" ? "at least " : ""}${length} bytes` };
}

/** The error for payload `i` (of an allocation needing `length` bytes there), whose data is not an ArrayBufferView. */
export function badPayload(i: number, payload: unknown, length?: number): TensorPipeError {
  const { name, shape, size } = part("payload", i, length);
  if (typeof payload !== "object" || payload === null) return invalid(`${name} must be an object ${shape}, got ${describeValue(payload)}`);
  const data = (payload as { data?: unknown }).data;
  return invalid(`${name}: data must be a TypedArray or DataView${size}; got ${describeValue(data)}${fix(data)}`);
}

/** Whether `b` is a device buffer as cudaBuffer() makes them. */
function isDeviceBuffer(b: unknown): b is DeviceBuffer {
  const d = (b as { device?: Partial<Device> } | undefined)?.device;
  return typeof b === "object" && b !== null && typeof d?.type === "string" && Number.isInteger(d.index) && typeof (b as DeviceBuffer).byteLength === "number";
}

/** Whether `view` is over a detached ArrayBuffer (a loan already written, a buffer transferred away): it then reads as empty. */
export function isDetached(view: ArrayBufferView): boolean {
  if (view.byteLength !== 0) return false;
  try {
    new Uint8Array(view.buffer, 0, 0);
    return false;
  } catch {
    return true;
  }
}

/** ERR_TP_INVALID_ARG for a part whose memory is detached: sent as it is, it would go as empty. */
export function detachedPart(kind: "payload" | "tensor", i: number): TensorPipeError {
  return invalid(
    `${kind} ${i}: its memory is detached (a pipe.loan() already written or given back, a received message's view after release(), or an ArrayBuffer transferred to another thread), so it would go as empty: take a new loan for each write, or copy what you keep of a message before releasing it`,
  );
}

/** Throws unless tensor `i` (of an allocation needing `length` bytes there) has a buffer of memory the library takes. */
export function checkTensorBuffer(i: number, tensor: unknown, length?: number): void {
  const { name, shape, size } = part("tensor", i, length);
  if (ArrayBuffer.isView(tensor)) throw invalid(`${name} must be an object ${shape}, got a ${tensor.constructor.name} itself: pass { buffer: it }`);
  if (typeof tensor !== "object" || tensor === null) throw invalid(`${name} must be an object ${shape}, got ${describeValue(tensor)}`);
  const buffer = (tensor as { buffer?: unknown }).buffer;
  if (ArrayBuffer.isView(buffer)) return;
  if (isDeviceBuffer(buffer)) {
    // CPU memory is a TypedArray: an object that only says it is on the CPU holds none.
    if (buffer.device.type !== "cpu") return;
    throw invalid(`${name}: buffer is an object that names the CPU as its device but is no memory; a CPU tensor's buffer is a TypedArray or DataView${size}`);
  }
  throw invalid(`${name}: buffer must be a TypedArray, DataView or CudaBuffer${size}; got ${describeValue(buffer)}${fix(buffer)}`);
}

/** Whether `device` is a { type, index } device. */
export function isDevice(device: unknown): device is Device {
  const d = device as Partial<Device> | undefined;
  return typeof d === "object" && d !== null && typeof d.type === "string" && Number.isInteger(d.index) && d.index! >= 0;
}

/** Throws unless `device` is a { type, index } device (a tensor's targetDevice). */
export function checkDevice(i: number, device: unknown): void {
  if (isDevice(device)) return;
  throw invalid(`tensor ${i}: targetDevice must be { type, index }, e.g. CPU_DEVICE or { type: "cuda", index: 0 }; got ${describeValue(device)}`);
}

/** The payloads and tensors of what read() was given, each [] when left out. */
export function allocationParts(a: Partial<Allocation>): Allocation {
  if (typeof a !== "object" || a === null || Array.isArray(a)) {
    throw invalid(`read() takes an allocation { payloads?: [{ data }], tensors?: [{ buffer }] } sized from the descriptor, got ${describeValue(a)}`);
  }
  const { payloads = [], tensors = [] } = a;
  if (!Array.isArray(payloads)) throw invalid(`allocation.payloads must be an array of { data }, got ${describeValue(payloads)}`);
  if (!Array.isArray(tensors)) throw invalid(`allocation.tensors must be an array of { buffer }, got ${describeValue(tensors)}`);
  return { payloads, tensors };
}
