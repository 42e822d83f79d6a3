import { protocolError } from "@tensorpipe/core/backend";

/**
 * What the sender tells the receiver for each tensor, as one frame, once
 * the tensor is ready to be read: the allocation's IPC handle (64 bytes),
 * the tensor's offset in the allocation and its length (u64 LE each). The
 * receiver answers with a frame of its own once it has copied: empty, or
 * the UTF-8 text of what failed.
 */
export const IPC_REQUEST_BYTES = 64 + 8 + 8;

/** What a sender tells the receiver to open its tensor with. */
export interface IpcRequest {
  /** cudaIpcMemHandle_t of the allocation holding the tensor (64 bytes). */
  memHandle: Uint8Array;
  /** The tensor's offset in the allocation. */
  offset: number;
  /** The tensor's bytes. */
  length: number;
}

/** An IpcRequest's 80 bytes. */
export function encodeIpcRequest(r: IpcRequest): Uint8Array {
  const out = new Uint8Array(IPC_REQUEST_BYTES);
  out.set(r.memHandle, 0);
  const view = new DataView(out.buffer);
  view.setBigUint64(64, BigInt(r.offset), true);
  view.setBigUint64(72, BigInt(r.length), true);
  return out;
}

/** Decodes an IpcRequest; ERR_TP_PROTOCOL on bad bytes. */
export function decodeIpcRequest(bytes: Uint8Array): IpcRequest {
  if (bytes.byteLength !== IPC_REQUEST_BYTES) throw protocolError(`cuda-ipc request of ${bytes.byteLength} bytes, not ${IPC_REQUEST_BYTES}`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const offset = view.getBigUint64(64, true);
  const length = view.getBigUint64(72, true);
  if (offset > BigInt(Number.MAX_SAFE_INTEGER) || length > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw protocolError("cuda-ipc request offset or length out of range");
  }
  return { memHandle: bytes.slice(0, 64), offset: Number(offset), length: Number(length) };
}
