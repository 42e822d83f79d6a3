import { protocolError } from "@tensorpipe/core/backend";

/**
 * A cuda-ipc connection carries both ends' sends at once, so each frame
 * starts with its kind. A request, sent once the tensor is ready to be
 * read: the kind (0), the allocation's IPC handle (64 bytes), the tensor's
 * offset in the allocation and its length (u64 LE each). An answer, sent
 * by the receiver once it has copied: the kind (1), then nothing, or the
 * UTF-8 text of what failed. Answers, for a peer whose wire extension says
 * it reads them (ANSWERS_EXTENSION): the kind (2) and a count (u32 LE), one
 * frame for that many copies done, oldest first.
 */
const REQUEST = 0;
const ANSWER = 1;
const ANSWERS = 2;

/** The wire extension of an end that reads ANSWERS frames. */
export const ANSWERS_EXTENSION = "answers:counted";

export const IPC_REQUEST_BYTES = 1 + 64 + 8 + 8;

/** What a sender tells the receiver to open its tensor with. */
export interface IpcRequest {
  /** cudaIpcMemHandle_t of the allocation holding the tensor (64 bytes). */
  memHandle: Uint8Array;
  /** The tensor's offset in the allocation. */
  offset: number;
  /** The tensor's bytes. */
  length: number;
}

/** An IpcRequest's frame. */
export function encodeIpcRequest(r: IpcRequest): Uint8Array {
  const out = new Uint8Array(IPC_REQUEST_BYTES);
  out[0] = REQUEST;
  out.set(r.memHandle, 1);
  const view = new DataView(out.buffer);
  view.setBigUint64(65, BigInt(r.offset), true);
  view.setBigUint64(73, BigInt(r.length), true);
  return out;
}

/** An answer's frame: `failure` is what went wrong, absent when the copy is done. */
export function encodeIpcAnswer(failure?: string): Uint8Array {
  const text = failure === undefined ? new Uint8Array(0) : Buffer.from(failure, "utf8");
  const out = new Uint8Array(1 + text.byteLength);
  out[0] = ANSWER;
  out.set(text, 1);
  return out;
}

/** One frame that answers `count` copies, all done. */
export function encodeIpcAnswers(count: number): Uint8Array {
  const out = new Uint8Array(5);
  out[0] = ANSWERS;
  new DataView(out.buffer).setUint32(1, count, true);
  return out;
}

/** A frame read from the peer: a request, an answer with its failure text if any, or `count` answers of copies done. */
export type IpcFrame = { kind: "request"; request: IpcRequest } | { kind: "answer"; failure?: string } | { kind: "answers"; count: number };

/** Decodes a frame; ERR_TP_PROTOCOL on bad bytes. */
export function decodeIpcFrame(bytes: Uint8Array): IpcFrame {
  if (bytes[0] === ANSWER) {
    return bytes.byteLength === 1 ? { kind: "answer" } : { kind: "answer", failure: Buffer.from(bytes.subarray(1)).toString("utf8") };
  }
  if (bytes[0] === ANSWERS) {
    if (bytes.byteLength !== 5) throw protocolError(`cuda-ipc: a counted answer of ${bytes.byteLength} bytes, not 5`);
    return { kind: "answers", count: new DataView(bytes.buffer, bytes.byteOffset, 5).getUint32(1, true) };
  }
  return { kind: "request", request: decodeIpcRequest(bytes) };
}

/** Decodes a request's frame; ERR_TP_PROTOCOL on bad bytes. */
export function decodeIpcRequest(bytes: Uint8Array): IpcRequest {
  if (bytes.byteLength !== IPC_REQUEST_BYTES || bytes[0] !== REQUEST) {
    throw protocolError(`cuda-ipc: a frame of ${bytes.byteLength} bytes of kind ${bytes[0]}, not a request (${IPC_REQUEST_BYTES} bytes of kind ${REQUEST})`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const offset = view.getBigUint64(65, true);
  const length = view.getBigUint64(73, true);
  if (offset > BigInt(Number.MAX_SAFE_INTEGER) || length > BigInt(Number.MAX_SAFE_INTEGER)) {
    throw protocolError("cuda-ipc request offset or length out of range");
  }
  return { memHandle: bytes.slice(1, 65), offset: Number(offset), length: Number(length) };
}
