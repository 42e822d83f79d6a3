import { type Descriptor, ErrorCode, TensorPipeError, protocolError } from "@tensorpipe/core/backend";

/** The CPU values a rendezvous carries: typed arrays, Buffers and DataViews. */
export type RendezvousValue = ArrayBufferView;

type ViewType = { make: (buffer: ArrayBufferLike, byteOffset: number, byteLength: number) => ArrayBufferView; elementSize: number };

function typed(C: { new (b: ArrayBufferLike, o: number, n: number): ArrayBufferView; BYTES_PER_ELEMENT: number }): ViewType {
  return { make: (b, o, bytes) => new C(b, o, bytes / C.BYTES_PER_ELEMENT), elementSize: C.BYTES_PER_ELEMENT };
}

// Each type by the name it travels under; the receiver rebuilds the same kind of view.
// A Map: a peer's "__proto__" or "toString" names none.
const VIEW_TYPES = new Map<string, ViewType>(
  Object.entries({
    Int8Array: typed(Int8Array),
    Uint8Array: typed(Uint8Array),
    Uint8ClampedArray: typed(Uint8ClampedArray),
    Int16Array: typed(Int16Array),
    Uint16Array: typed(Uint16Array),
    Int32Array: typed(Int32Array),
    Uint32Array: typed(Uint32Array),
    Float32Array: typed(Float32Array),
    Float64Array: typed(Float64Array),
    BigInt64Array: typed(BigInt64Array),
    BigUint64Array: typed(BigUint64Array),
    DataView: { make: (b, o, n) => new DataView(b, o, n), elementSize: 1 },
    Buffer: { make: (b: ArrayBufferLike, o: number, n: number) => Buffer.from(b, o, n), elementSize: 1 },
  } satisfies Record<string, ViewType>),
);

/** What travels in a message's metadata next to the value's bytes. */
export interface ValueHeader {
  v: 1;
  key: string;
  type: string;
}

export function typeOf(value: unknown): string {
  if (!ArrayBuffer.isView(value)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, "a rendezvous value must be a typed array, a Buffer or a DataView");
  }
  const name = Buffer.isBuffer(value) ? "Buffer" : value.constructor.name;
  if (!VIEW_TYPES.has(name)) throw new TensorPipeError(ErrorCode.INVALID_ARG, `a rendezvous cannot carry a ${name}`);
  return name;
}

/** A view of `type` over `bytes` (which the caller allocated aligned for it). */
export function viewOf(type: string, bytes: Uint8Array): RendezvousValue {
  return VIEW_TYPES.get(type)!.make(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

/** The header and length of a rendezvous message, or a protocol error naming what is wrong. */
export function decodeHeader(d: Descriptor): { header: ValueHeader; length: number } {
  let header: ValueHeader;
  try {
    header = JSON.parse(d.metadata) as ValueHeader;
  } catch {
    throw protocolError("rendezvous message metadata is not JSON", "rendezvous");
  }
  if (header?.v !== 1 || typeof header.key !== "string" || typeof header.type !== "string") {
    throw protocolError("rendezvous message without version 1, key and type", "rendezvous");
  }
  const t = VIEW_TYPES.get(header.type);
  if (!t) throw protocolError(`rendezvous value of unknown type "${header.type}"`, "rendezvous");
  if (d.payloads.length !== 0 || d.tensors.length !== 1) {
    throw protocolError(`rendezvous message with ${d.payloads.length} payloads and ${d.tensors.length} tensors (want 0 and 1)`, "rendezvous");
  }
  const length = d.tensors[0]!.length;
  if (length % t.elementSize !== 0) {
    throw protocolError(`rendezvous ${header.type} of ${length} bytes is not whole elements`, "rendezvous");
  }
  return { header, length };
}
