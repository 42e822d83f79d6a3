/**
 * What a handshake says of each backend it did not take, beyond the
 * choice's own reasons (negotiation.ts): what this side left out before
 * any choice, the peer's backends this side lacks, the peer's reasons in
 * place of "not offered", what an upstream listener's answer lets this
 * side infer; and the same verdicts in a line for logs and errors.
 */
import { deviceKey, pairLabel } from "../device.js";
import type { Registered } from "../negotiation.js";
import { describePath } from "../path-policy.js";
import { MAX_PEER_NAMES, MAX_VERDICTS, type OfferedBackends, type PathVerdict, peerNames } from "../path-report.js";
import { peerText, safeText } from "../peer-text.js";
import type { Brochure, BrochureAnswer } from "../protocol/handshake.js";
import type { Viability } from "../viability.js";
import { isExtensionName } from "./extensions.js";
import type { HandshakeSettings } from "./settings.js";

/** A verdict as logs give it: "cma: cpu:0->cpu:0: chosen (priority 1200)". */
export function verdictLine(v: PathVerdict): string {
  return `${v.name}: ${v.pair ? `${v.pair}: ` : ""}${v.reason}`;
}

/** How much of the verdicts an error shows: reasons, the backends sharing one, and characters of a name and of a reason. */
const IN_ERROR = { reasons: 6, names: 6, name: 128, reason: 640 } as const;

/** What the choice said of the backends of `kind` this side could use, in one line (for the error when none was left). */
export function choiceVerdicts(verdicts: readonly PathVerdict[], kind: PathVerdict["kind"], withPath = false): string {
  // Backends with the same reason share it: "mpt, basic: not allowed by ...".
  const byReason = new Map<string, string[]>();
  for (const v of verdicts) {
    if (v.kind !== kind || (!withPath && v.outcome === "not allowed") || v.outcome === "not registered") continue;
    const reason = `${v.pair ? `${v.pair}: ` : ""}${v.reason}`;
    byReason.set(reason, [...(byReason.get(reason) ?? []), v.name]);
  }
  // A peer's devices may make hundreds of verdicts: an error names the first few.
  const some = (all: readonly string[], max: number, sep: string) =>
    [...all.slice(0, max), ...(all.length > max ? [`${all.length - max} more`] : [])].join(sep);
  // Verdicts hold a peer's words made safe already: shown, they are only cut.
  const lines = [...byReason].map(
    ([reason, names]) =>
      `${some(
        names.map((n) => safeText(n, IN_ERROR.name)),
        IN_ERROR.names,
        ", ",
      )}: ${safeText(reason, IN_ERROR.reason)}`,
  );
  return some(lines, IN_ERROR.reasons, "; ");
}

/**
 * What this side leaves out of a pipe before any choice: backends its path
 * does not allow, and those that cannot run here (the connecting side does
 * not offer them; the listening side's choice says so itself).
 */
export function leftOut(all: HandshakeSettings, allowed: HandshakeSettings, notViable: boolean): PathVerdict[] {
  const out: PathVerdict[] = [];
  for (const [kind, registered, kept] of [
    ["transport", all.transports, allowed.transports],
    ["channel", all.channels, allowed.channels],
  ] as const) {
    for (const r of (registered as ReadonlyMap<string, Registered<{ isViable(): Viability }>>).values()) {
      if (!kept.has(r.name)) {
        out.push({ kind, name: r.name, by: "here", outcome: "not allowed", reason: `not allowed by this side's path (${describePath(all.path!)})` });
        continue;
      }
      const v = r.context.isViable();
      if (notViable && !v.viable) out.push({ kind, name: r.name, by: "here", outcome: "not viable", reason: `not viable here: ${v.reason}` });
    }
  }
  return out;
}

/**
 * The peer's backends this side has none of, by the names it offered them
 * under: the first few, made safe to show, and a count of the rest (a
 * peer's names cost it a few bytes each, and must not cost this side more).
 */
export function notRegistered(all: HandshakeSettings, b: Brochure): PathVerdict[] {
  const out: PathVerdict[] = [];
  const lacks = (kind: PathVerdict["kind"], offered: Iterable<string>, here: ReadonlyMap<string, unknown>) => {
    const unknown = peerNames([...offered].filter((name) => !here.has(name)));
    for (const name of unknown.names) {
      out.push({ kind, name, by: "here", outcome: "not registered", reason: "the peer offers it; this side has none registered under that name" });
    }
    if (unknown.more > 0) {
      out.push({
        kind,
        name: `(${unknown.more} more)`,
        by: "here",
        outcome: "not registered",
        reason: `the peer offers ${unknown.more} more ${kind}s this side does not have`,
      });
    }
  };
  lacks("transport", b.transportDomainDescriptors.keys(), all.transports);
  lacks("channel", b.channelDeviceDescriptors.keys(), all.channels);
  return out;
}

/** "the peer does not offer it" replaced by the peer's own reason, where it gave one. */
export function withPeerReasons(verdicts: readonly PathVerdict[], peer: readonly PathVerdict[]): PathVerdict[] {
  const said = new Set(peer.map((v) => `${v.kind} ${v.name}`));
  return [...verdicts.filter((v) => !(v.outcome === "not offered" && said.has(`${v.kind} ${v.name}`))), ...peer];
}

/**
 * What the connecting side can tell of an upstream listener's choice from
 * its answer alone: what it chose, and for everything else offered, the
 * reasons it could have had.
 */
export function inferredVerdicts(brochure: Brochure, answer: BrochureAnswer): PathVerdict[] {
  const out: PathVerdict[] = [];
  for (const name of brochure.transportDomainDescriptors.keys()) {
    if (isExtensionName(name)) continue;
    out.push(
      name === answer.transport
        ? { kind: "transport", name, by: "there", outcome: "chosen", reason: "chosen by the listener" }
        : {
            kind: "transport",
            name,
            by: "inferred",
            outcome: "not chosen",
            reason: `the listener chose ${answer.transport}: it lacks this one, cannot run it, does not listen on it, has another domain, or ranks it lower (it did not say which: an upstream listener never does)`,
          },
    );
  }
  const chosen = new Map<string, Set<string>>();
  for (const p of answer.channelForDevicePair.slice(0, MAX_VERDICTS)) {
    // The answer's pairs are the listener's: its device first.
    const pair = peerText(pairLabel(p.remote, p.local), 128);
    let pairs = chosen.get(p.channel);
    if (!pairs) chosen.set(p.channel, (pairs = new Set()));
    pairs.add(pair);
  }
  for (const name of brochure.channelDeviceDescriptors.keys()) {
    if (isExtensionName(name)) continue;
    const pairs = chosen.get(name);
    if (pairs) {
      for (const pair of pairs) out.push({ kind: "channel", name, pair, by: "there", outcome: "chosen", reason: "chosen by the listener" });
    } else {
      out.push({
        kind: "channel",
        name,
        by: "inferred",
        outcome: "not chosen",
        reason:
          "the listener chose no device pair for it: it lacks it, cannot run it, describes its devices otherwise, or gave every pair to a channel it ranks higher (it did not say which: an upstream listener never does)",
      });
    }
  }
  return out;
}

/** An offer in a few words: "transports uv, shm; channels cma, basic". */
export function describeOffer(o: OfferedBackends): string {
  return `transports ${o.transports.join(", ") || "none"}; channels ${o.channels.join(", ") || "none"}`;
}

/** Names of the backends a brochure offers, its own entries left out: the first few of each, made safe to show. */
export function offeredIn(b: Brochure): OfferedBackends {
  return { transports: peerNames(b.transportDomainDescriptors.keys()).names, channels: peerNames(b.channelDeviceDescriptors.keys()).names };
}

/** A brochure in one line, for logs: each backend offered, with its descriptors, the entries of ours left out. */
export function describeBrochure(b: Brochure): string {
  const safe = (s: string) => peerText(s, 256);
  const some = <T>(all: T[], show: (x: T) => string) => {
    const shown = all.slice(0, MAX_PEER_NAMES).map(show);
    if (all.length > MAX_PEER_NAMES) shown.push(`(${all.length - MAX_PEER_NAMES} more)`);
    return shown.join(", ") || "none";
  };
  const transports = [...b.transportDomainDescriptors].filter(([name]) => !isExtensionName(name));
  const channels = [...b.channelDeviceDescriptors].filter(([name]) => !isExtensionName(name));
  return `transports ${some(transports, ([n, d]) => `${safe(n)} "${safe(d)}"`)}; channels ${some(channels, ([name, devices]) => `${safe(name)} [${some([...devices.values()], (d) => `${safe(deviceKey(d.device))} "${safe(d.descriptor)}"`)}]`)}`;
}

/** This side's path, as errors end with it. */
export function pathNote(settings: HandshakeSettings): string {
  return settings.path ? `; this side's path: ${describePath(settings.path)}` : "";
}
