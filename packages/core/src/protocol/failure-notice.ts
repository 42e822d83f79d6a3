/**
 * Why a pipe failed, told to its peer (docs/wire-protocol.md): one frame on
 * the reply connection, sent only between two ends of this library, just
 * before the failing end closes. Upstream's reply connection carries
 * DescriptorReplies alone, a structure of one member; a notice is a
 * structure of two (code, message), so each is told from the other by its
 * first bytes.
 */
import { ErrorCode, type TensorPipeError } from "../errors.js";
import { Nop } from "../nop/prefixes.js";
import { NopReader } from "../nop/reader.js";
import { NopWriter } from "../nop/writer.js";
import { peerText } from "../peer-text.js";
import { type DescriptorReply, decodeDescriptorReply } from "./message.js";

/** What a notice's message may hold: a peer's words cost this side at most this much. */
export const MAX_NOTICE_CHARS = 1024;

/** A peer's word on why it failed the pipe. */
export interface FailureNotice {
  /** One of ErrorCode's values; a code this side does not know is ERR_TP_PROTOCOL. */
  readonly code: ErrorCode;
  /** The peer's message, made safe to show and bounded. */
  readonly message: string;
}

const CODES: ReadonlySet<string> = new Set(Object.values(ErrorCode));

/** The notice of `err`, for the peer. */
export function encodeFailureNotice(err: TensorPipeError): Uint8Array {
  const w = new NopWriter(64 + MAX_NOTICE_CHARS * 3);
  w.structure(2).string(err.code).string(err.message.slice(0, MAX_NOTICE_CHARS));
  return w.finish();
}

/** A frame read on the reply connection: a DescriptorReply, or a notice; ERR_TP_PROTOCOL on anything else. */
export function decodeReplyFrame(bytes: Uint8Array): { reply: DescriptorReply } | { notice: FailureNotice } {
  const r = new NopReader(bytes, "reply frame");
  r.expect(Nop.Structure, "a DescriptorReply or a failure notice");
  // A DescriptorReply has one member, a notice two: anything else fails as a DescriptorReply would.
  if (r.uint(64) !== 2) return { reply: decodeDescriptorReply(bytes) };
  const code = r.string();
  const message = r.string();
  r.end();
  return { notice: { code: CODES.has(code) ? (code as ErrorCode) : ErrorCode.PROTOCOL, message: peerText(message, MAX_NOTICE_CHARS) } };
}
