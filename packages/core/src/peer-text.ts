/**
 * The one sanitiser for text that may come from a peer (device types,
 * backend names, descriptors, reasons, keys, addresses), applied wherever
 * text is shown: error messages, debug logs, flight records, path reports
 * and the CLI's output. A peer must not forge a line, move a terminal's
 * cursor, hide text or flood a log through what it sends.
 */

// C0 and C1 controls, the line and paragraph separators, bidi overrides and
// isolates, zero-width and invisible marks, the BOM: what could forge a
// line or hide text in a log or a terminal.
// eslint-disable-next-line no-control-regex
const UNSAFE = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]/;
// eslint-disable-next-line no-control-regex
const UNSAFE_ALL = /[\u0000-\u001f\u007f-\u009f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]/g;
const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const LONE_SURROGATE_ALL = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/** The characters a peer's text may have by default before it is cut. */
export const PEER_TEXT_MAX = 1024;

/** One escape as escape() writes it. */
const ESCAPE = /^\\(x[0-9a-f]{2}|u[0-9a-f]{4})/;

function escape(c: string): string {
  const code = c.charCodeAt(0);
  return code <= 0xff ? `\\x${code.toString(16).padStart(2, "0")}` : `\\u${code.toString(16).padStart(4, "0")}`;
}

/**
 * `value` made safe to show: control and invisible characters escaped
 * (`\x1b`, `\u2028`), a lone surrogate replaced, and at most `max`
 * characters in all, cut on a whole character (and a whole escape) and
 * saying how long it was. What it returns, it returns unchanged: text
 * already made safe is not cut again. Text with nothing to escape and
 * within `max` comes back as it was, at the cost of two tests.
 */
export function peerText(value: string, max = PEER_TEXT_MAX): string {
  const unsafe = UNSAFE.test(value) || LONE_SURROGATE.test(value);
  if (value.length <= max && !unsafe) return value;
  // Escaping makes no character longer than 6: no more than this can be kept.
  let out = value.length > max ? value.slice(0, max) : value;
  if (LONE_SURROGATE.test(out)) out = out.replace(LONE_SURROGATE_ALL, "\ufffd");
  if (UNSAFE.test(out)) out = out.replace(UNSAFE_ALL, escape);
  if (out.length <= max && value.length <= max) return out;
  const cut = `... (${value.length} characters)`;
  let end = Math.max(0, max - cut.length);
  // Not half an escape, nor half a surrogate pair.
  const escapeAt = out.lastIndexOf("\\", end - 1);
  if (escapeAt >= 0 && end - escapeAt < 6) {
    const escaped = ESCAPE.exec(out.slice(escapeAt, escapeAt + 6));
    if (escaped && escapeAt + escaped[0].length > end) end = escapeAt;
  }
  if (end > 0 && /[\ud800-\udbff]/.test(out[end - 1]!)) end--;
  // A slice would keep the whole of the peer's text alive (V8 slices
  // point into their parent); one of a fresh concatenation does not.
  return ` ${out.slice(0, end)}`.slice(1) + cut;
}

/** A peer's text quoted in an error: at most 128 characters, made safe. */
export function peerExcerpt(value: string): string {
  return peerText(value, 128);
}
