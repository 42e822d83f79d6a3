/**
 * The path a pipe took, as each end can tell it: what each side offered,
 * what was chosen, and why every other transport and channel was not.
 *
 * The listening side judges, so it knows its own reasons; the connecting
 * side knows why it left backends out of its offer. Between two
 * tensorpipe-js ends each tells the other in a handshake entry of its own
 * (PATH_REPORT_ENTRY in handshake/extensions.ts), which upstream
 * TensorPipe passes over as it passes over any channel it lacks; toward an
 * upstream peer nothing is sent, and what that peer decided is inferred
 * from its answer (handshake/verdicts.ts), and marked so.
 */
import { pairLabel } from "./device.js";
import { isExtensionName } from "./handshake/extensions.js";
import { peerText, safeText } from "./peer-text.js";
import type { DevicePairChoice } from "./protocol/handshake.js";

/** What became of one transport, or of one channel for one device pair. */
export type PathOutcome =
  | "chosen"
  | "lower priority"
  | "not viable"
  | "not allowed"
  | "not offered"
  | "not registered"
  | "not listened on"
  | "descriptors differ"
  | "not chosen";

/** One transport, or one channel (for one device pair, where it says), and why it was or was not taken. */
export interface PathVerdict {
  /** A transport or a channel. */
  readonly kind: "transport" | "channel";
  /** Its registered name. */
  readonly name: string;
  /** The device pair, this side's device first ("cpu:0->cpu:0"); absent when the verdict is on the whole backend. */
  readonly pair?: string;
  /**
   * Which end the verdict is about: "here"; "there" (the peer, as it said
   * or as its answer shows); "inferred" where an upstream peer, which
   * sends no reasons, could have had any of several.
   */
  readonly by: "here" | "there" | "inferred";
  /** What became of it. */
  readonly outcome: PathOutcome;
  /** In words, with the descriptors where they differ and the fix where one is known. */
  readonly reason: string;
}

/** The backends one side offered (the connecting side) or could use (the listening side). */
export interface OfferedBackends {
  /** The transports, by name. */
  readonly transports: readonly string[];
  /** The channels, by name. */
  readonly channels: readonly string[];
}

/** The path of a pipe from one end: `pipe.path`. */
export interface PathReport {
  /** Which end of the handshake this is. */
  readonly side: "connect" | "listen";
  /** The transport chosen. */
  readonly transport: string;
  /** The channel of each device pair, this side's device first. */
  readonly pairs: readonly DevicePairChoice[];
  /** What this side offered or could use. */
  readonly offeredHere: OfferedBackends;
  /** What the peer offered or could use; undefined where an upstream listener did not say. */
  readonly offeredThere: OfferedBackends | undefined;
  /** Whether the peer told its reasons (a tensorpipe-js peer); else its part is inferred. */
  readonly peerReported: boolean;
  /** Every transport and channel either side has, and what became of it. */
  readonly verdicts: readonly PathVerdict[];
}

/** What a side says of its part in its report. */
export interface ReportBody {
  offered: OfferedBackends;
  verdicts: PathVerdict[];
  /** In a listener's refusal: what it found none of that it could use. */
  refused?: PathVerdict["kind"];
}

/** Verdicts a report holds at most, the peer's or this side's, and in a pipe's report both together. */
export const MAX_VERDICTS = 64;
/** Characters of names, pairs and reasons a pipe's report holds at most, both sides' together. */
export const MAX_REPORT_CHARS = 8192;
/** Characters of a peer's report as it travels (JSON): a report of MAX_VERDICTS verdicts and MAX_REPORT_CHARS characters fits well within it. */
const MAX_REPORT_JSON = 32 * 1024;
/** Characters of one reason a peer gives. */
const MAX_REASON = 1024;
/** Names a peer offers that are kept (shown, listed as not registered here): the rest are counted. */
export const MAX_PEER_NAMES = 32;
const MAX_NAME = 128;
const OUTCOMES: ReadonlySet<string> = new Set<PathOutcome>([
  "chosen",
  "lower priority",
  "not viable",
  "not allowed",
  "not offered",
  "not registered",
  "not listened on",
  "descriptors differ",
  "not chosen",
]);

/** This side's report as it travels (JSON): what it offered, its verdicts, what a refusal found none of. */
export function reportJson(offered: OfferedBackends, verdicts: readonly PathVerdict[], refused?: PathVerdict["kind"]): string {
  const body: ReportBody = { offered, verdicts: boundedVerdicts(verdicts), ...(refused ? { refused } : {}) };
  return JSON.stringify(body);
}

/** `v` made safe to show (a peer's words in it were made so already). */
function safeVerdict(v: PathVerdict): PathVerdict {
  const pair = v.pair === undefined ? {} : { pair: safeText(v.pair, MAX_NAME) };
  return { ...v, name: safeText(v.name, MAX_NAME), ...pair, reason: safeText(v.reason, MAX_REASON) };
}

function chars(v: PathVerdict): number {
  return v.name.length + (v.pair?.length ?? 0) + v.reason.length;
}

/**
 * At most MAX_VERDICTS verdicts of at most MAX_REPORT_CHARS characters,
 * in their order, those that say what was chosen kept first; the rest are
 * counted in one verdict more. A peer's devices and words cost it a few
 * bytes each, and must not cost a pipe more than this: 1024 pipes waiting
 * for accept() with a dialler's 470 long verdicts each had held 1.2 GB.
 */
export function boundedVerdicts(all: readonly PathVerdict[]): PathVerdict[] {
  // This side's reasons quote the peer's descriptors too (a channel's describeMismatch).
  const verdicts = all.map(safeVerdict);
  let total = 0;
  const keep = new Set<PathVerdict>();
  for (const chosenPass of [true, false]) {
    for (const v of verdicts) {
      if ((v.outcome === "chosen") !== chosenPass) continue;
      // Room is left for the verdict that counts the rest.
      if (keep.size >= MAX_VERDICTS - 1 || total + chars(v) > MAX_REPORT_CHARS - 160) break;
      keep.add(v);
      total += chars(v);
    }
  }
  if (keep.size === verdicts.length) return verdicts;
  const left = verdicts.length - keep.size;
  return [
    ...verdicts.filter((v) => keep.has(v)),
    {
      kind: "channel",
      name: `(${left} more)`,
      by: "here",
      outcome: "not chosen",
      reason: `${left} more verdicts, not kept (a report keeps ${MAX_VERDICTS} and ${MAX_REPORT_CHARS} characters)`,
    },
  ];
}

function text(value: unknown, max = MAX_REASON): string | undefined {
  return typeof value === "string" ? peerText(value, max) : undefined;
}

/** The first MAX_PEER_NAMES of a peer's backend names, made safe to show, and how many more there were. */
export function peerNames(names: Iterable<string>): { names: string[]; more: number } {
  const out: string[] = [];
  let more = 0;
  for (const n of names) {
    if (isExtensionName(n)) continue;
    if (out.length < MAX_PEER_NAMES) out.push(peerText(n, MAX_NAME));
    else more++;
  }
  return { names: out, more };
}

function names(value: unknown): string[] {
  if (!Array.isArray(value)) return [];
  return value
    .slice(0, MAX_PEER_NAMES)
    .filter((s): s is string => typeof s === "string")
    .map((s) => peerText(s, MAX_NAME));
}

/** The peer's report, as it travelled (PeerExtensions.report); undefined when it sent none or sent nonsense. */
export function peerReport(raw: string | undefined): ReportBody | undefined {
  if (raw === undefined) return undefined;
  // Ours are bounded far below this: a longer one is not parsed into objects only to be cut.
  if (raw.length > MAX_REPORT_JSON) {
    return {
      offered: { transports: [], channels: [] },
      verdicts: [
        {
          kind: "channel",
          name: "(its report)",
          by: "here",
          outcome: "not chosen",
          reason: `the peer's report was ${raw.length} characters, over ${MAX_REPORT_JSON}: not read`,
        },
      ],
    };
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return undefined;
  }
  if (typeof parsed !== "object" || parsed === null) return undefined;
  const { offered, verdicts, refused } = parsed as { offered?: { transports?: unknown; channels?: unknown }; verdicts?: unknown; refused?: unknown };
  const out: PathVerdict[] = [];
  // One verdict per backend and pair: a peer's repeats are dropped.
  const seen = new Set<string>();
  let total = 0;
  for (const v of Array.isArray(verdicts) ? verdicts : []) {
    // Past the bounds the rest is not looked at.
    if (out.length >= MAX_VERDICTS || total >= MAX_REPORT_CHARS) break;
    if (typeof v !== "object" || v === null) continue;
    const { kind, name, pair, by, outcome, reason } = v as Record<string, unknown>;
    if ((kind !== "transport" && kind !== "channel") || (by !== "here" && by !== "there") || !OUTCOMES.has(outcome as string)) continue;
    const n = text(name, MAX_NAME);
    const r = text(reason);
    if (n === undefined || r === undefined) continue;
    const p = text(pair, MAX_NAME);
    const key = `${kind}\u0000${n}\u0000${p ?? ""}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const verdict: PathVerdict = { kind, name: n, ...(p === undefined ? {} : { pair: p }), by, outcome: outcome as PathOutcome, reason: r };
    total += chars(verdict);
    out.push(verdict);
  }
  const body: ReportBody = { offered: { transports: names(offered?.transports), channels: names(offered?.channels) }, verdicts: out };
  if (refused === "transport" || refused === "channel") body.refused = refused;
  return body;
}

/** "cpu:0->cuda:1" seen from the other end: "cuda:1->cpu:0". */
function reversed(pair: string | undefined): string | undefined {
  if (pair === undefined) return undefined;
  const [a, b] = pair.split("->");
  return b === undefined ? pair : `${b}->${a}`;
}

/**
 * The peer's verdicts as this side tells them: its "here" is "there".
 * Those it made about this side ("not offered" by us, say) are left to
 * this side, which knows its own reasons.
 */
export function fromPeer(verdicts: readonly PathVerdict[]): PathVerdict[] {
  const out: PathVerdict[] = [];
  for (const v of verdicts) {
    if (v.by !== "here") continue;
    const pair = reversed(v.pair);
    out.push({ ...v, ...(pair === undefined ? {} : { pair }), by: "there", reason: toldFromHere(v.reason) });
  }
  return out;
}

// The peer's words about its side and ours, as this side says them.
const RETOLD: readonly [string, string][] = [
  ["not viable here: ", "not viable there: "],
  ["not allowed by this side's path", "not allowed by the peer's path"],
  ["the peer offers it; this side has none registered under that name", "this side offers it; the peer has none registered under that name"],
];
/** Reasons that quote both sides ("... (\"a\" here, \"b\" there)..."), whose quotes change places. */
const QUOTING = ['domains differ ("', 'descriptors do not match ("'];
const HERE = '" here, "';
const THERE = '" there)';

/** A peer's reason told from this side: a few index lookups, never a backtracking regex over the peer's text. */
function toldFromHere(reason: string): string {
  for (const [from, to] of RETOLD) if (reason.startsWith(from)) return to + reason.slice(from.length);
  for (const start of QUOTING) {
    if (!reason.startsWith(start)) continue;
    const here = reason.indexOf(HERE, start.length);
    const there = here < 0 ? -1 : reason.indexOf(THERE, here + HERE.length);
    if (there < 0) return reason;
    return `${start}${reason.slice(here + HERE.length, there)}${HERE}${reason.slice(start.length, here)}${reason.slice(there)}`;
  }
  return reason;
}

/** The report's first line: the side, and what was chosen. */
export function pathHeadline(report: Pick<PathReport, "side" | "transport" | "pairs">): string {
  return `${report.side} side: transport ${report.transport}; channels ${report.pairs.map((p) => `${pairLabel(p.local, p.remote)} ${p.channel}`).join(", ") || "none"}`;
}

/** The report in lines, for logs and errors. */
export function describePathReport(report: PathReport): string {
  const lines = [
    pathHeadline(report),
    `offered here: transports ${report.offeredHere.transports.join(", ") || "none"}; channels ${report.offeredHere.channels.join(", ") || "none"}`,
    report.offeredThere
      ? `offered there: transports ${report.offeredThere.transports.join(", ") || "none"}; channels ${report.offeredThere.channels.join(", ") || "none"}`
      : "offered there: not said (an upstream peer); what it decided is inferred",
  ];
  for (const v of report.verdicts) {
    const said = v.reason.startsWith(v.outcome) ? v.reason : `${v.outcome}: ${v.reason}`;
    lines.push(`${v.kind} ${v.name}${v.pair ? ` ${v.pair}` : ""}${v.by === "here" ? "" : ` (${v.by})`}: ${said}`);
  }
  return lines.join("\n");
}
