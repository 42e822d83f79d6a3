/**
 * libnop, the serialisation upstream TensorPipe's wire format uses: each
 * value starts with a prefix byte saying what follows (docs/wire-protocol.md).
 */
/** libnop encoding prefixes used by upstream TensorPipe's wire format. */
export const Nop = {
  /** An unsigned integer in the next byte. */
  U8: 0x80,
  /** An unsigned integer in the next 2 bytes, little-endian. */
  U16: 0x81,
  /** An unsigned integer in the next 4 bytes. */
  U32: 0x82,
  /** An unsigned integer in the next 8 bytes. */
  U64: 0x83,
  /** A signed integer in the next byte. */
  I8: 0x84,
  /** A signed integer in the next 2 bytes. */
  I16: 0x85,
  /** A signed integer in the next 4 bytes. */
  I32: 0x86,
  /** A signed integer in the next 8 bytes. */
  I64: 0x87,
  /** A variant: the index of the alternative, then its value. */
  Variant: 0xb8,
  /** A structure: the member count, then each member. */
  Structure: 0xb9,
  /** An array: the element count, then each element. */
  Array: 0xba,
  /** A map: the entry count, then each key and value. */
  Map: 0xbb,
  /** Binary data: the length, then the bytes. */
  Binary: 0xbc,
  /** A string: the length, then UTF-8 bytes. */
  String: 0xbd,
  /** An empty optional or variant. */
  Empty: 0xbe,
} as const;
