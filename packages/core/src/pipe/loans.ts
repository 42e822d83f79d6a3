/**
 * The loans pipes hand out from a channel's shared memory (Pipe.loan()),
 * by their ArrayBuffer: a loan goes in one write, and only through the
 * pipe that lent it. Through another pipe it would go by address from
 * memory its lender hands out again once its own reader is done: that
 * other reader would get whatever was written there next.
 */
import { bufferTag } from "../buffer-tag.js";
import { ErrorCode, TensorPipeError } from "../errors.js";
import type { MessageTensor } from "../message.js";

interface Loan {
  /** The pipe's engine that lent it. */
  lender: object;
  /** Who that pipe goes to, for the error. */
  peer: string;
  written: boolean;
}

const loans = bufferTag<Loan>();
/** No loan was ever recorded: writes skip the lookups. */
let none = true;

/** Records `view`, lent by the pipe of `lender` (to `peer`). */
export function recordLoan(view: Uint8Array, lender: object, peer: string): Uint8Array {
  none = false;
  loans.set(view.buffer, { lender, peer, written: false });
  return view;
}

/**
 * Takes the loans among `tensors` for a write through the pipe of
 * `writer`: ERR_TP_INVALID_ARG, and none taken, for a loan of another pipe
 * or one written already (two tensors of one message may share a loan).
 */
export function takeLoans(tensors: readonly MessageTensor[], writer: object): void {
  if (none) return;
  let found = false;
  for (let i = 0; i < tensors.length; i++) {
    const loan = loanOf(tensors[i]!);
    if (!loan) continue;
    found = true;
    if (loan.lender !== writer) {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        `tensor ${i} is a loan of the pipe to ${loan.peer}, which sends it from its own pool: write it there, or send a copy (loan.slice()) through this pipe`,
      );
    }
    if (loan.written) {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        `tensor ${i} is a loan written already: a loan goes in one write (two tensors of one message may share it); take a new loan for each write`,
      );
    }
  }
  if (!found) return;
  for (const t of tensors) {
    const loan = loanOf(t);
    if (loan) loan.written = true;
  }
}

/**
 * Whether `view` is an unsent loan of the pipe of `lender`, which may take
 * it back: ERR_TP_INVALID_ARG for a loan of another pipe. Taken back, it
 * counts as written (its memory is detached anyway).
 */
export function takeBack(view: Uint8Array, lender: object): boolean {
  const loan = none ? undefined : loans.get(view.buffer);
  if (!loan || loan.written) return false;
  if (loan.lender !== lender) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `unloan(): this is a loan of the pipe to ${loan.peer}: give it back there`);
  }
  loan.written = true;
  return true;
}

function loanOf(t: MessageTensor): Loan | undefined {
  return ArrayBuffer.isView(t.buffer) ? loans.get(t.buffer.buffer) : undefined;
}
