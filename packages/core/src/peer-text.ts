/**
 * The one sanitiser for what a peer sends and this side shows: its
 * escaping table, and two ways in. peerText() takes a peer's words where
 * they enter what is shown (a quoted descriptor, a name, a reason, a key):
 * every character that could forge a line, move a terminal's cursor or
 * hide text is escaped, and so are `"` and `\`, so that quoted words stay
 * inside their quotes and no escape can be faked. safeText() guards each
 * place where text is shown (error messages, debug logs, flight records,
 * path reports, the CLI's output): it escapes the same characters but
 * leaves `"` and `\`, so it changes nothing that peerText() made, and
 * catches what reached a message without it. Both bound the length.
 */

// Controls, formats (soft hyphen, bidi controls and isolates, zero-width
// and tag characters), private-use, unassigned and surrogate code points,
// line and paragraph separators, and what renders as nothing (combining
// grapheme joiner, Hangul and Khmer fillers, Mongolian selectors, the
// braille blank, variation selectors).
const HIDDEN = String.raw`\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Cs}\p{Zl}\p{Zp}\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2800\u3164\uffa0\ufe00-\ufe0f\u{e0100}-\u{e01ef}`;
const SHOWN = new RegExp(`[${HIDDEN}]`, "u");
const SHOWN_ALL = new RegExp(`[${HIDDEN}]`, "gu");
const QUOTED = new RegExp(`[${HIDDEN}"\\\\]`, "u");
const QUOTED_ALL = new RegExp(`[${HIDDEN}"\\\\]`, "gu");

/** The characters a peer's text may have by default before it is cut. */
export const PEER_TEXT_MAX = 1024;

function escaped(c: string): string {
  if (c === '"' || c === "\\") return `\\${c}`;
  const cp = c.codePointAt(0)!;
  if (cp <= 0xff) return `\\x${cp.toString(16).padStart(2, "0")}`;
  if (cp <= 0xffff) return `\\u${cp.toString(16).padStart(4, "0")}`;
  return `\\u{${cp.toString(16)}}`;
}

/** `out` cut to at most `max` characters with what it says of the cut, never within an escape or a surrogate pair. */
function bound(out: string, originalLength: number, max: number): string {
  const cut = `... (${originalLength} characters)`;
  let end = Math.max(0, max - cut.length);
  // Not half an escape (\xHH, \uHHHH, \u{H...}, \" or \\).
  const escapeAt = out.lastIndexOf("\\", end - 1);
  if (escapeAt >= 0 && end - escapeAt < 10) {
    const escaped = /^\\(x[0-9a-f]{2}|u\{[0-9a-f]+\}|u[0-9a-f]{4}|["\\])/.exec(out.slice(escapeAt, escapeAt + 10));
    if (escaped && escapeAt + escaped[0].length > end) end = escapeAt;
  }
  if (end > 0 && /[\ud800-\udbff]/.test(out[end - 1]!)) end--;
  // A slice would keep the whole of the text alive (V8 slices point into
  // their parent); one of a fresh concatenation does not.
  return ` ${out.slice(0, end)}`.slice(1) + cut;
}

function sanitise(value: string, max: number, one: RegExp, all: RegExp): string {
  if (value.length <= max && !one.test(value)) return value;
  // Escaping makes a character at most 10 long: no more than this can be kept.
  let out = value.length > max ? value.slice(0, max) : value;
  if (one.test(out)) out = out.replace(all, escaped);
  if (out.length <= max && value.length <= max) return out;
  return bound(out, value.length, max);
}

/**
 * A peer's words made safe to show and to quote: hidden characters
 * escaped (`\x1b`, `\u2028`, `\u{e0041}`), `"` and `\` escaped, at most
 * `max` characters in all, cut on a whole character and saying how long
 * it was. Words with nothing to escape and within `max` come back as they
 * were.
 */
export function peerText(value: string, max = PEER_TEXT_MAX): string {
  return sanitise(value, max, QUOTED, QUOTED_ALL);
}

/** A peer's words quoted in an error: at most 128 characters, made safe, between quotes. */
export function peerExcerpt(value: string): string {
  return `"${peerText(value, 128)}"`;
}

/**
 * Text made safe to show as one line: hidden characters escaped, at most
 * `max` characters. What peerText() made, or safeText() itself, it
 * returns unchanged.
 */
export function safeText(value: string, max: number): string {
  return sanitise(value, max, SHOWN, SHOWN_ALL);
}
