/**
 * Memory a pipe lends (a loan, a view readMessage() gave) goes back to its
 * pool when released and is lent again. ArrayBuffer.prototype.transfer()
 * (on by default from Node 21) would move it to a new buffer that no
 * release detaches: that buffer would then see, and change, the messages
 * lent in the same place later. Node already copies such buffers where
 * they are posted to another thread; lentBuffer() gives one a prototype
 * whose transfer() and transferToFixedLength() refuse.
 */
import { ErrorCode, TensorPipeError } from "./errors.js";

function refuse(): never {
  throw new TensorPipeError(
    ErrorCode.INVALID_ARG,
    "this ArrayBuffer is memory a pipe lent (a loan, or a view readMessage() gave), which goes back to its pool on release and is lent again: transfer() would keep it past that; copy the bytes with slice() to keep them",
  );
}

const LENT = Object.create(ArrayBuffer.prototype, {
  transfer: { value: refuse, writable: true, configurable: true },
  transferToFixedLength: { value: refuse, writable: true, configurable: true },
}) as ArrayBuffer;

/** `buffer`, made by a backend over memory it lends, with transfer() refused; returns it. */
export function lentBuffer<T extends ArrayBuffer>(buffer: T): T {
  Object.setPrototypeOf(buffer, LENT);
  return buffer;
}
