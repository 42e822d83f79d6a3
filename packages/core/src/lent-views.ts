/**
 * Views a peer lent this side (readMessage() over a channel that shares
 * memory) that writes still send from. Released while a write still sends
 * from it, a view's memory would go back to its lender, which lends it
 * again: that write's reader would get whatever was written there next.
 * A release asked for meanwhile waits for the last such write to be over.
 */
import { bufferTag } from "./buffer-tag.js";
import type { MessagePayload, MessageTensor } from "./message.js";

interface LentView {
  /** Writes under way that send from it. */
  sending: number;
  /** The release asked for while they were. */
  release: (() => void) | undefined;
}

const views = bufferTag<LentView>();
/** No view was ever lent: writes skip the lookups. */
let none = true;

/** Records `view`, lent by a peer: what gives it back (through `release`) once no write sends from it. */
export function adoptLent(view: Uint8Array, release: () => void): () => void {
  none = false;
  const lent: LentView = { sending: 0, release: undefined };
  views.set(view.buffer, lent);
  return () => {
    if (lent.sending === 0) release();
    else lent.release = release;
  };
}

/** Holds the lent views among a write's parts until it is over: what to call then, or undefined when there are none. */
export function holdLentViews(payloads: readonly MessagePayload[], tensors: readonly MessageTensor[]): (() => void) | undefined {
  if (none) return undefined;
  let held: LentView[] | undefined;
  for (const p of payloads) held = hold(p.data, held);
  for (const t of tensors) if (ArrayBuffer.isView(t.buffer)) held = hold(t.buffer, held);
  if (!held) return undefined;
  const sent = held;
  return () => {
    for (const lent of sent) {
      if (--lent.sending > 0 || !lent.release) continue;
      const release = lent.release;
      lent.release = undefined;
      release();
    }
  };
}

function hold(view: ArrayBufferView, held: LentView[] | undefined): LentView[] | undefined {
  const lent = views.get(view.buffer);
  if (!lent) return held;
  lent.sending++;
  (held ??= []).push(lent);
  return held;
}
