/**
 * The handshake that turns connections into the parts of a pipe, both
 * ways: dial() on the connecting side, answer() on the listening side
 * (docs/wire-protocol.md; the shared-secret extension in auth.ts). Each
 * returns PipeParts; the Context makes and keeps the Pipe.
 */
import { networkInterfaces } from "node:os";
import { splitHostPort } from "./address.js";
import { AUTH_ENTRY, type AuthSession, type SharedSecretAuth } from "./auth.js";
import type { Channel, ChannelContext } from "./channel.js";
import { debugLog, describeError } from "./debug.js";
import { HandshakeEvents } from "./flight-recorder.js";
import { CPU_DEVICE, deviceKey, sameDevice } from "./device.js";
import { ErrorCode, TensorPipeError, closedError, fromNativeError, protocolError } from "./errors.js";
import {
  type ChannelChoice,
  type Registered,
  buildBrochure,
  byPriority,
  checkAnswer,
  chooseChannels,
  chooseTransport,
  describePairs,
  localDeviceDescriptors,
  peerWireExtension,
  WIRE_EXTENSIONS_ENTRY,
} from "./negotiation.js";
import type { PipeOptions, PipeParts } from "./pipe/parts.js";
import {
  type Brochure,
  type BrochureAnswer,
  type DeviceDescriptors,
  ConnectionKind,
  decodeBrochure,
  decodeBrochureAnswer,
  encodeBrochure,
  encodeBrochureAnswer,
  encodePacket,
} from "./protocol.js";
import { type PathPolicy, allowedBackends, describePath } from "./path-policy.js";
import {
  type OfferedBackends,
  PATH_REPORT_ENTRY,
  type PathReport,
  type PathVerdict,
  describePathReport,
  fromPeer,
  pathHeadline,
  MAX_PEER_NAMES,
  MAX_VERDICTS,
  boundedVerdicts,
  peerNames,
  inferredVerdicts,
  peerReport,
  reportEntry,
} from "./path-report.js";
import { peerExcerpt, peerText, safeText } from "./peer-text.js";
import type { Registration, Registrations } from "./registrations.js";
import type { Connection, TransportContext } from "./transport.js";
import type { Viability } from "./viability.js";

const log = debugLog("negotiation");

/** Before a peer has shown it speaks the protocol, its frames stay small. */
const MAX_HANDSHAKE_FRAME = 1024 * 1024;

/** What both sides of a handshake draw on: a context's backends and settings. */
export interface HandshakeSettings {
  /** Sent to listeners in the first packet. */
  readonly name: string;
  /** The registered transports, by name. */
  readonly transports: ReadonlyMap<string, Registered<TransportContext>>;
  /** The registered channels, by name. */
  readonly channels: ReadonlyMap<string, Registered<ChannelContext>>;
  /** The shared-secret handshake, when on. */
  readonly auth?: SharedSecretAuth;
  /** How long the listening side waits for the connections it registered (ms). */
  readonly handshakeTimeout: number;
  /** The limits the pipe keeps on what its peer sends. */
  readonly pipeOptions: PipeOptions;
  /** The backends this handshake may choose among (ConnectOptions.path, ListenerOptions.path). */
  readonly path?: PathPolicy;
}

/** `settings` with only the backends its path allows. */
function restricted(settings: HandshakeSettings): HandshakeSettings {
  if (!settings.path) return settings;
  return {
    ...settings,
    transports: allowedBackends(settings.transports, settings.path, "transport"),
    channels: allowedBackends(settings.channels, settings.path, "channel"),
  };
}

/** What the listening side offers a handshake: where it listens, and ids for the connections it asks for. */
export interface ListeningSide {
  /** The transports listened on. */
  readonly transports: ReadonlySet<string>;
  /** Where `transport` listens, as sent to the peer. */
  addressOf(transport: string): string | undefined;
  /** The ids of the connections asked for. */
  readonly registrations: Registrations;
  /** The answer went out on `main`: its handshake now waits on the connections asked for. */
  answered(main: Connection): void;
}

/** A brochure in one line: each backend offered, with its descriptors. */
function describeBrochure(b: Brochure): string {
  const safe = (s: string) => peerText(s, 256);
  const some = <T>(all: T[], show: (x: T) => string) => {
    const shown = all.slice(0, MAX_PEER_NAMES).map(show);
    if (all.length > MAX_PEER_NAMES) shown.push(`(${all.length - MAX_PEER_NAMES} more)`);
    return shown.join(", ") || "none";
  };
  const transports = [...b.transportDomainDescriptors].filter(([name]) => name !== AUTH_ENTRY);
  const channels = [...b.channelDeviceDescriptors].filter(([name]) => name !== PATH_REPORT_ENTRY);
  return `transports ${some(transports, ([n, d]) => `${safe(n)} "${safe(d)}"`)}; channels ${some(channels, ([name, devices]) => `${safe(name)} [${some([...devices.values()], (d) => `${safe(deviceKey(d.device))} "${safe(d.descriptor)}"`)}]`)}`;
}

function viable<T extends { isViable(): Viability }>(from: ReadonlyMap<string, Registered<T>>): Map<string, T> {
  const out = new Map<string, T>();
  for (const [name, r] of from) if (r.context.isViable().viable) out.set(name, r.context);
  return out;
}

/** A verdict as logs give it: "cma: cpu:0->cpu:0: chosen (priority 1200)". */
function verdictLine(v: PathVerdict): string {
  return `${v.name}: ${v.pair ? `${v.pair}: ` : ""}${v.reason}`;
}

/** What the choice said of the backends of `kind` this side could use, in one line (for the error when none was left). */
function choiceVerdicts(verdicts: readonly PathVerdict[], kind: PathVerdict["kind"], withPath = false): string {
  // Backends with the same reason share it: "mpt, basic: not allowed by ...".
  const byReason = new Map<string, string[]>();
  for (const v of verdicts) {
    if (v.kind !== kind || (!withPath && v.outcome === "not allowed") || v.outcome === "not registered") continue;
    const reason = `${v.pair ? `${v.pair}: ` : ""}${v.reason}`;
    byReason.set(reason, [...(byReason.get(reason) ?? []), v.name]);
  }
  // A peer's devices may make hundreds of verdicts: an error names the first few.
  const some = (all: readonly string[], max: number, sep: string) => [...all.slice(0, max), ...(all.length > max ? [`${all.length - max} more`] : [])].join(sep);
  // Verdicts hold a peer's words made safe already: shown, they are only cut.
  const lines = [...byReason].map(([reason, names]) => `${some(names.map((n) => safeText(n, IN_ERROR.name)), IN_ERROR.names, ", ")}: ${safeText(reason, IN_ERROR.reason)}`);
  return some(lines, IN_ERROR.reasons, "; ");
}

/** How much of the verdicts an error shows: reasons, the backends sharing one, and characters of a name and of a reason. */
const IN_ERROR = { reasons: 6, names: 6, name: 128, reason: 640 } as const;

/**
 * What this side leaves out of a pipe before any choice: backends its path
 * does not allow, and those that cannot run here (the connecting side does
 * not offer them; the listening side's choice says so itself).
 */
function leftOut(all: HandshakeSettings, allowed: HandshakeSettings, notViable: boolean): PathVerdict[] {
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
function notRegistered(all: HandshakeSettings, b: Brochure): PathVerdict[] {
  const out: PathVerdict[] = [];
  const lacks = (kind: PathVerdict["kind"], offered: Iterable<string>, here: ReadonlyMap<string, unknown>) => {
    const unknown = peerNames([...offered].filter((name) => !here.has(name)));
    for (const name of unknown.names) {
      out.push({ kind, name, by: "here", outcome: "not registered", reason: "the peer offers it; this side has none registered under that name" });
    }
    if (unknown.more > 0) {
      out.push({ kind, name: `(${unknown.more} more)`, by: "here", outcome: "not registered", reason: `the peer offers ${unknown.more} more ${kind}s this side does not have` });
    }
  };
  lacks("transport", b.transportDomainDescriptors.keys(), all.transports);
  lacks("channel", b.channelDeviceDescriptors.keys(), all.channels);
  return out;
}

/** "the peer does not offer it" replaced by the peer's own reason, where it gave one. */
function withPeerReasons(verdicts: readonly PathVerdict[], peer: readonly PathVerdict[]): PathVerdict[] {
  const said = new Set(peer.map((v) => `${v.kind} ${v.name}`));
  return [...verdicts.filter((v) => !(v.outcome === "not offered" && said.has(`${v.kind} ${v.name}`))), ...peer];
}

/** An offer in a few words: "transports uv, shm; channels cma, basic". */
function describeOffer(o: OfferedBackends): string {
  return `transports ${o.transports.join(", ") || "none"}; channels ${o.channels.join(", ") || "none"}`;
}

/** Names of the backends a brochure offers, its own entries left out: the first few of each, made safe to show. */
function offeredIn(b: Brochure): OfferedBackends {
  return { transports: peerNames(b.transportDomainDescriptors.keys()).names, channels: peerNames(b.channelDeviceDescriptors.keys()).names };
}

function pathNote(settings: HandshakeSettings): string {
  return settings.path ? `; this side's path: ${describePath(settings.path)}` : "";
}

/** The longest address a listener may answer with: a DNS name's 253 characters, a port, brackets and a scope fit well within it. */
const MAX_ANSWERED_ADDRESS = 512;

/** How long a listener still waits for the connections it asked for once the peer closed the first one. */
const CLOSED_PEER_GRACE_MS = 1000;

/** The transport a listener names in an answer that refuses the pipe: none. */
const REFUSED = "";

/** A listener's answer that refuses the pipe, with its report saying why. */
function refusal(report: DeviceDescriptors): BrochureAnswer {
  return {
    transport: REFUSED,
    address: "",
    transportRegistrationIds: new Map(),
    transportDomainDescriptor: "",
    channelRegistrationIds: new Map(),
    channelDeviceDescriptors: new Map([[PATH_REPORT_ENTRY, report]]),
    channelForDevicePair: [],
  };
}

/** The error for a listener's refusal: what it found none of, and its reasons, told from this side. */
function refused(answer: BrochureAnswer, url: string, settings: HandshakeSettings): TensorPipeError {
  const report = peerReport(answer.channelDeviceDescriptors);
  const kind = report?.refused ?? "transport";
  const why = report ? choiceVerdicts(fromPeer(report.verdicts), kind, true) : "";
  const what = kind === "transport" ? "no transport in common" : "no channel for CPU tensors";
  return new TensorPipeError(ErrorCode.NEGOTIATION, `the listener refused the pipe: ${what} (there: ${why || (report ? "none allowed" : "it gave no reasons")})${pathNote(settings)}`, { where: url });
}

/** `e` as a TensorPipeError carrying the handshake's events. */
function recorded(e: unknown, events: HandshakeEvents): unknown {
  if (events.enabled && e instanceof TensorPipeError) {
    events.add("error", describeError(e));
    // An earlier end may have given it its own.
    e.flightRecord ??= events.events;
  }
  return e;
}

/**
 * Where to open the connections a listener's answer asks for. On the
 * transport dialled, where this side reached it: a listener has one
 * address a transport, so what it names there is where this side is
 * connected already, as the listener sees itself (another spelling, a
 * link-local scope that only means something here, its side of a NAT or
 * a container's port mapping, 0.0.0.0), and a hostile listener cannot
 * send this side's connections to a third party. On another transport,
 * what it names, where that is the listener's: shared memory only where
 * this side reached it on this machine (else a listener elsewhere could
 * point the connections at any process here), and a network address only
 * on the host this side reached (this machine, where it reached it over
 * shared memory).
 */
function followUpAddress(
  answer: BrochureAnswer,
  dialled: Registered<TransportContext>,
  chosen: TransportContext,
  address: string,
  main: Connection,
  url: string,
): string {
  if (answer.transport === dialled.name) return address;
  const overNetwork = (dialled.context.medium ?? "network") === "network";
  const reached = overNetwork ? hostOf(main.remoteAddress) : undefined;
  if ((chosen.medium ?? "network") !== "network") {
    if (reached === undefined ? !overNetwork : isThisMachine(reached)) return answer.address;
    throw protocolError(
      `the listener, reached at ${main.remoteAddress}, switched the pipe to ${answer.transport}, which reaches this machine alone: a listener elsewhere may name only itself`,
      url,
    );
  }
  const named = hostOf(answer.address);
  if (named !== undefined && (reached !== undefined ? named === reached : isThisMachine(named))) return answer.address;
  throw protocolError(
    `the listener named ${peerExcerpt(answer.address)} for the pipe's ${answer.transport} connections, which is not ${
      overNetwork ? `the host this side reached it at (${main.remoteAddress})` : "this machine, where this side reached it"
    }: a listener may name only itself`,
    url,
  );
}

/** The host of "host:port", lower-cased and without an IPv6 scope; undefined for another form. */
function hostOf(address: string): string | undefined {
  try {
    // An IPv4 peer of a dual-stack socket is an IPv4 host.
    return splitHostPort(address).host.split("%")[0]!.toLowerCase().replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, "");
  } catch {
    return undefined;
  }
}

function isThisMachine(host: string): boolean {
  if (host === "localhost" || host === "::1" || host.startsWith("127.")) return true;
  return Object.values(networkInterfaces()).some((addresses) => addresses?.some((a) => a.address.toLowerCase() === host));
}

/**
 * `err` as the dialling side reports it: a listener that closed the
 * connection before the handshake was done gives the same error whichever
 * transport saw it (in its own handshake, as shm, or in ours), since the
 * causes are the same.
 */
function duringHandshake(url: string, err: TensorPipeError, auth: boolean, requested = false): TensorPipeError {
  if (err.code !== ErrorCode.PEER_CLOSED && err.code !== ErrorCode.CONNECTION_RESET) return err;
  const couldNot =
    "it could not take the connection (out of file descriptors, past its maxPendingHandshakes, or with maxUnaccepted pipes waiting for its accept(): see its connectionError events)";
  return new TensorPipeError(
    ErrorCode.NEGOTIATION,
    requested
      ? `peer closed a connection its answer asked for during the handshake: ${couldNot}`
      : `peer closed the connection during the handshake: not a TensorPipe listener, or no transport in common${
          auth ? ", or the shared secrets differ" : ", or it requires authentication (ContextOptions.auth)"
        }, or ${couldNot}`,
    { where: url, cause: err },
  );
}

/** Where the connecting side dials, and what it keeps of the attempt. */
export interface DialTarget {
  /** The URL, for errors. */
  readonly url: string;
  /** The transport of the first connection. */
  readonly transport: Registered<TransportContext>;
  /** Its address, as that transport takes it. */
  readonly address: string;
  /** Cancels every connection of the attempt. */
  readonly signal: AbortSignal | undefined;
  /** Every connection opened, for the caller to close if it gives up. */
  readonly opened: Connection[];
}

/**
 * The connecting side: dials `address` over `transport`, offers what this
 * side has, and opens the connections the listener's answer asks for.
 * Every connection opened goes into `opened` (so that the caller can close
 * them all if it gives up), each under `signal`.
 */
export async function dial(settings: HandshakeSettings, target: DialTarget): Promise<PipeParts> {
  const events = new HandshakeEvents(settings.pipeOptions.flightRecorder > 0);
  events.add("handshake", `dial ${target.url} over ${target.transport.name}`);
  try {
    return await dialSteps(settings, target, events);
  } catch (e) {
    throw recorded(e, events);
  }
}

async function dialSteps(settings: HandshakeSettings, { url, transport, address, signal, opened }: DialTarget, events: HandshakeEvents): Promise<PipeParts> {
  const all = settings;
  settings = restricted(settings);
  let main: Connection;
  try {
    main = await transport.context.connect(address, { signal });
  } catch (e) {
    throw duringHandshake(url, fromNativeError(e, url), settings.auth !== undefined);
  }
  opened.push(main);
  if (signal?.aborted) throw new TensorPipeError(ErrorCode.ABORTED, "connect was aborted");
  const { auth } = settings;
  const brochure = buildBrochure(byPriority(settings.transports.values()), byPriority(settings.channels.values()));
  const offeredHere = offeredIn(brochure);
  const ownVerdicts = leftOut(all, settings, true);
  const hello = auth?.hello();
  // A brochure that upstream could have sent stays byte for byte upstream's:
  // the reasons are traded only where it carries entries of ours already,
  // or where a path makes a refusal likely and its reasons worth the bytes.
  if (hello || settings.path || brochure.channelDeviceDescriptors.has(WIRE_EXTENSIONS_ENTRY)) {
    brochure.channelDeviceDescriptors.set(PATH_REPORT_ENTRY, reportEntry(offeredHere, ownVerdicts));
  }
  if (hello) brochure.transportDomainDescriptors.set(AUTH_ENTRY, hello.entry);
  if (events.enabled) events.add("handshake", `connected; offering ${describeOffer(offeredHere)}`);
  if (log.enabled) {
    log("connect to %s over %s: offering %s", url, transport.name, describeBrochure(brochure));
    for (const v of ownVerdicts) log("not offering %s %s: %s", v.kind, v.name, v.reason);
  }
  const exchange = async (frames: Uint8Array[]): Promise<BrochureAnswer> => {
    const sent = main.write(frames);
    try {
      const [, bytes] = await Promise.all([sent, main.read(MAX_HANDSHAKE_FRAME)]);
      return decodeBrochureAnswer(bytes);
    } catch (e) {
      const err = fromNativeError(e, url);
      if (err.code !== ErrorCode.PROTOCOL) throw duringHandshake(url, err, auth !== undefined);
      // An HTTP server's "HTTP/1.1" read as a frame length, say.
      throw new TensorPipeError(ErrorCode.PROTOCOL, `the answer is not a TensorPipe listener's: is this the address of one? (${err.message})`, { where: url, cause: err });
    }
  };
  let answer = await exchange([encodePacket({ kind: "spontaneous", contextName: settings.name }), encodeBrochure(brochure)]);
  let session: AuthSession | undefined;
  if (hello) {
    const reply = auth!.answerChallenge(hello.client, answer);
    session = reply.session;
    brochure.transportDomainDescriptors.set(AUTH_ENTRY, reply.entry);
    answer = await exchange([encodeBrochure(brochure)]);
  }
  if (answer.transport === AUTH_ENTRY) {
    throw new TensorPipeError(ErrorCode.PERMISSION_DENIED, "listener requires authentication: set ContextOptions.auth with its shared secret", {
      where: url,
    });
  }
  if (answer.transport === REFUSED) throw refused(answer, url, settings);
  // Where to open the pipe's connections is the listener's word: no address is that long or holds such characters.
  if (answer.address.length > MAX_ANSWERED_ADDRESS || peerText(answer.address) !== answer.address) {
    throw protocolError(`the listener answered with ${peerExcerpt(answer.address)}, which is not an address to dial`, url);
  }
  const viableChannels = viable(settings.channels);
  const pairs = checkAnswer(viable(settings.transports), viableChannels, answer);
  const listenerSaid = peerReport(answer.channelDeviceDescriptors);
  const path: PathReport = {
    side: "connect",
    transport: answer.transport,
    pairs,
    offeredHere,
    offeredThere: listenerSaid?.offered,
    peerReported: listenerSaid !== undefined,
    verdicts: boundedVerdicts([...ownVerdicts, ...(listenerSaid ? fromPeer(listenerSaid.verdicts) : inferredVerdicts(brochure, answer))]),
  };
  if (events.enabled) events.add("path", `answered from ${answer.address}: ${pathHeadline(path)}`);
  if (log.enabled) {
    const [first, ...rest] = describePathReport(path).split("\n");
    log("%s answered, at %s: %s", url, answer.address, first);
    for (const line of rest) log("%s: %s", url, line);
  }
  // Every CPU tensor either way would otherwise fail on its first write.
  const cpuChannels = [...viableChannels].filter(([, c]) => c.deviceDescriptors().some((d) => sameDevice(d.device, CPU_DEVICE)));
  if (cpuChannels.length > 0 && !pairs.some((p) => sameDevice(p.local, CPU_DEVICE) && sameDevice(p.remote, CPU_DEVICE))) {
    const offered = cpuChannels.map(([name, c]) => `${name} "${localDeviceDescriptors(c).get(deviceKey(CPU_DEVICE))?.descriptor}"`).join(", ");
    throw new TensorPipeError(
      ErrorCode.NEGOTIATION,
      settings.path
        ? `the path (${describePath(settings.path)}) is not met: the listener chose no channel for CPU tensors among ${offered} (inferred from its answer: it lacks them, cannot run them, forbids them, or describes them otherwise)`
        : `no channel for CPU tensors in common with the listener: this side offers ${cpuChannels.map(([name]) => name).join(", ")}; register one that both ends have (basic works everywhere)`,
      { where: url },
    );
  }
  const chosen = settings.transports.get(answer.transport)!.context;
  const followUp = followUpAddress(answer, transport, chosen, address, main, url);
  if (followUp !== answer.address) {
    if (events.enabled) events.add("handshake", `the listener named ${answer.address}; its connections go where it was reached`);
    if (log.enabled) log("%s named itself %s: its connections go to %s, where it was reached", url, answer.address, followUp);
  }
  // Switched to a transport of this machine alone (shm), the process that
  // listens there must be the one this side dialled, as the kernel says:
  // else a listener could hand this side's pipe to another process here.
  let provenPid: number | undefined;
  const proveListener = (c: Connection): void => {
    if (answer.transport === transport.name || (chosen.medium ?? "network") === "network" || c.peerPid === provenPid) return;
    const pid = c.peerPid;
    try {
      if (pid === undefined || !main.provePeerProcess) throw new Error("cannot tell");
      main.provePeerProcess(pid);
    } catch {
      throw protocolError(
        `the listener, reached at ${main.remoteAddress}, switched the pipe to ${answer.transport} at ${peerExcerpt(answer.address)}, where ${pid === undefined ? "a process this side cannot name" : `process ${pid}`} listens, not the one this side dialled: a listener may name only itself`,
        url,
      );
    }
    provenPid = pid;
  };
  const openRequested = async (id: bigint): Promise<Connection> => {
    const c = await chosen.connect(followUp, { signal }).catch((e: unknown) => {
      // The address is the listener's word: one that is not an address at all is its fault, not the caller's.
      if (followUp === answer.address && (e as { code?: string }).code === ErrorCode.INVALID_ARG) {
        throw protocolError(`the listener answered with ${peerExcerpt(answer.address)}, which is not an address ${answer.transport} can dial`, url);
      }
      // Dropped in the transport's own handshake (shm's), as the first one would be.
      throw duringHandshake(url, fromNativeError(e, url), auth !== undefined, true);
    });
    opened.push(c);
    proveListener(c);
    const packet = encodePacket({ kind: "requested", registrationId: id });
    await c.write(session ? [packet, auth!.connectionProof(session, id)] : [packet]).catch((e: unknown) => {
      throw duringHandshake(url, fromNativeError(e, url), auth !== undefined, true);
    });
    return c;
  };
  const mainId = answer.transportRegistrationIds.get(ConnectionKind.MAIN);
  const replyId = answer.transportRegistrationIds.get(ConnectionKind.REPLY);
  if (replyId === undefined) throw protocolError("brochure answer registered no reply connection", url);
  // The first of a switched pipe's connections proves where they go before the rest are opened.
  const firstNew = mainId === undefined ? undefined : await openRequested(mainId);
  const [newMain, reply, ...channelConnections] = await Promise.all([
    firstNew ?? Promise.resolve(main),
    openRequested(replyId),
    ...[...answer.channelRegistrationIds.values()].flat().map(openRequested),
  ]);
  if (newMain !== main) main.close();
  events.add("handshake", `opened the ${2 + channelConnections.length} connection(s) asked for`);
  const channels = new Map<string, Channel>();
  const byChannel = new Map<string, Connection[]>();
  let next = 0;
  for (const [name, ids] of answer.channelRegistrationIds) {
    const conns = channelConnections.slice(next, next + ids.length);
    next += ids.length;
    byChannel.set(name, conns);
    channels.set(
      name,
      settings.channels.get(name)!.context.createChannel(conns, "connect", {
        transportMedium: chosen.medium ?? "network",
        peerWireExtension: peerWireExtension(answer.channelDeviceDescriptors, name),
      }),
    );
  }
  return {
    transport: answer.transport,
    main: newMain!,
    reply: reply!,
    channels,
    channelConnections: byChannel,
    pairs,
    peer: url,
    side: "connect",
    options: settings.pipeOptions,
    path,
    events: events.events,
  };
}

/**
 * The listening side, after a SpontaneousConnection packet on `main` (which
 * came on transport `cameOn`): reads the offer, chooses, answers, and waits
 * for the connections it registered.
 */
export async function answer(settings: HandshakeSettings, main: Connection, cameOn: string, listening: ListeningSide): Promise<PipeParts> {
  const events = new HandshakeEvents(settings.pipeOptions.flightRecorder > 0);
  events.add("handshake", `connection from ${main.remoteAddress} over ${cameOn}`);
  try {
    return await answerSteps(settings, main, cameOn, listening, events);
  } catch (e) {
    throw recorded(e, events);
  }
}

async function answerSteps(
  settings: HandshakeSettings,
  main: Connection,
  cameOn: string,
  listening: ListeningSide,
  events: HandshakeEvents,
): Promise<PipeParts> {
  // The offer is read and chosen from in a function of its own: nothing
  // holds it (up to MAX_HANDSHAKE_ENTRIES entries) while the peer opens
  // the connections asked for.
  const chosen = await chooseForOffer(settings, main, cameOn, listening, events);
  return await awaitConnections(chosen, main, cameOn, listening, events);
}

/** What a listener chose for a peer's offer, all it keeps of that offer. */
interface AnswerChoice {
  /** The settings as this listener's path restricts them. */
  settings: HandshakeSettings;
  session?: AuthSession;
  transport: Registered<TransportContext>;
  choice: ChannelChoice;
  path: PathReport;
  /** The peer's wire extension of each channel chosen. */
  peerExtensions: Map<string, string | undefined>;
}

/** Reads the peer's offer (after its proof, under authentication) and chooses, or refuses it. */
async function chooseForOffer(
  settings: HandshakeSettings,
  main: Connection,
  cameOn: string,
  listening: ListeningSide,
  events: HandshakeEvents,
): Promise<AnswerChoice> {
  const all = settings;
  settings = restricted(settings);
  const { auth } = settings;
  let brochure = decodeBrochure(await main.read(MAX_HANDSHAKE_FRAME));
  let session: AuthSession | undefined;
  if (auth) {
    const challenge = auth.challenge(brochure.transportDomainDescriptors.get(AUTH_ENTRY));
    session = challenge.session;
    const [, bytes] = await Promise.all([main.write([encodeBrochureAnswer(challenge.answer)]), main.read(MAX_HANDSHAKE_FRAME)]);
    brochure = decodeBrochure(bytes);
    auth.verifyProof(session, brochure.transportDomainDescriptors.get(AUTH_ENTRY));
  }
  brochure.transportDomainDescriptors.delete(AUTH_ENTRY);
  const from = main.remoteAddress;
  if (log.enabled) log("%s over %s offers %s", from, cameOn, describeBrochure(brochure));
  const offeredThere = offeredIn(brochure);
  if (events.enabled) events.add("handshake", `offered ${describeOffer(offeredThere)}`);
  const verdicts: PathVerdict[] = [...leftOut(all, settings, false), ...notRegistered(all, brochure)];
  // A peer's devices cost it a few bytes each: past a bound, its verdicts are counted, not kept.
  let uncounted = 0;
  const note = (v: PathVerdict) => {
    if (verdicts.length >= MAX_VERDICTS) {
      uncounted++;
      return;
    }
    verdicts.push(v);
    if (log.enabled) log("%s: %s", from, verdictLine(v));
  };
  const dialerSaid = peerReport(brochure.channelDeviceDescriptors);
  const offeredHere: OfferedBackends = {
    transports: [...settings.transports.values()].filter((t) => listening.transports.has(t.name) && t.context.isViable().viable).map((t) => t.name),
    channels: [...settings.channels.values()].filter((c) => c.context.isViable().viable).map((c) => c.name),
  };
  // A dialler that asked for reasons (ours; upstream never does) hears why
  // before the connection closes, instead of guessing from the close.
  const refuse = async (kind: PathVerdict["kind"], message: string): Promise<never> => {
    const err = new TensorPipeError(ErrorCode.NEGOTIATION, message, { where: from });
    if (dialerSaid) await main.write([encodeBrochureAnswer(refusal(reportEntry(offeredHere, verdicts.filter((v) => v.by === "here"), kind)))]).catch(() => undefined);
    throw err;
  };
  const transport = chooseTransport(byPriority(settings.transports.values()), listening.transports, brochure, note);
  if (!transport) {
    const why = choiceVerdicts(verdicts, "transport");
    return refuse("transport", `no transport in common (peer has: ${offeredThere.transports.join(", ") || "none"}; here: ${why || "none allowed"})${pathNote(settings)}`);
  }
  const choice = chooseChannels(byPriority(settings.channels.values()), brochure, note);
  if (settings.path && !choice.pairs.some((p) => sameDevice(p.local, CPU_DEVICE) && sameDevice(p.remote, CPU_DEVICE))) {
    const why = choiceVerdicts(verdicts, "channel");
    return refuse("channel", `no channel for CPU tensors (here: ${why || "none allowed"})${pathNote(settings)}`);
  }
  if (uncounted > 0) verdicts.push({ kind: "channel", name: `(${uncounted} more)`, by: "here", outcome: "descriptors differ", reason: `${uncounted} more verdicts on the peer's devices, not kept` });
  const path: PathReport = {
    side: "listen",
    transport: transport.name,
    pairs: choice.pairs,
    offeredHere,
    offeredThere,
    peerReported: dialerSaid !== undefined,
    verdicts: boundedVerdicts(dialerSaid ? withPeerReasons(verdicts, fromPeer(dialerSaid.verdicts)) : verdicts),
  };
  if (events.enabled) events.add("path", pathHeadline(path));
  // Toward upstream, whose brochure carries neither, the answer is upstream's alone.
  if (dialerSaid) choice.deviceDescriptors.set(PATH_REPORT_ENTRY, reportEntry(offeredHere, verdicts.filter((v) => v.by === "here")));
  if (!brochure.channelDeviceDescriptors.has(WIRE_EXTENSIONS_ENTRY)) choice.deviceDescriptors.delete(WIRE_EXTENSIONS_ENTRY);
  return {
    settings,
    session,
    transport,
    choice,
    path,
    peerExtensions: new Map(choice.selected.map((c) => [c.name, peerWireExtension(brochure.channelDeviceDescriptors, c.name)])),
  };
}

/** Answers with `chosen`, and waits for the connections the answer asked for. */
async function awaitConnections(
  { settings, session, transport, choice, path, peerExtensions }: AnswerChoice,
  main: Connection,
  cameOn: string,
  listening: ListeningSide,
  events: HandshakeEvents,
): Promise<PipeParts> {
  const registrations: Registration[] = [];
  const register = () => {
    const r = listening.registrations.register(session);
    registrations.push(r);
    return r;
  };
  const transportRegistrationIds = new Map<number, bigint>();
  const mainReg = transport.name !== cameOn ? register() : undefined;
  if (mainReg) transportRegistrationIds.set(ConnectionKind.MAIN, mainReg.id);
  transportRegistrationIds.set(ConnectionKind.REPLY, register().id);
  const channelRegs = new Map<string, Registration[]>();
  for (const c of choice.selected) {
    channelRegs.set(c.name, Array.from({ length: c.context.numConnectionsNeeded() }, register));
  }
  try {
    await main.write([
      encodeBrochureAnswer({
        transport: transport.name,
        address: listening.addressOf(transport.name)!,
        transportRegistrationIds,
        transportDomainDescriptor: transport.context.domainDescriptor(),
        channelRegistrationIds: new Map([...channelRegs].map(([name, regs]) => [name, regs.map((r) => r.id)])),
        channelDeviceDescriptors: choice.deviceDescriptors,
        channelForDevicePair: choice.pairs,
      }),
    ]);
    // The peer gives up the first connection once it has opened its
    // replacement, maybe before the others arrive: only a deadline counts
    // then. Where the first connection stays the pipe's, its close ends the
    // wait, but not at once: a peer that closes its pipe as soon as connect()
    // resolved has opened every connection asked for, which are on their
    // way, and its pipe is accepted here (and ends at once) like any other.
    let timer: NodeJS.Timeout | undefined;
    let waiting = true;
    const givenUp = new Promise<never>((_, reject) => {
      const giveUpIn = (ms: number, err: Error) => {
        if (waiting) timer = setTimeout(() => reject(err), ms);
      };
      if (mainReg) giveUpIn(settings.handshakeTimeout, new TensorPipeError(ErrorCode.TIMEOUT, "peer did not open the connections it was given ids for"));
      else main.closed.then((e) => giveUpIn(Math.min(CLOSED_PEER_GRACE_MS, settings.handshakeTimeout), e ?? closedError("connection")));
    });
    givenUp.catch(() => undefined);
    listening.answered(main);
    events.add("handshake", `answered; waiting for the ${registrations.length} connection(s) asked for`);
    const conns = await Promise.race([Promise.all(registrations.map((r) => r.connection)), givenUp]).finally(() => {
      waiting = false;
      clearTimeout(timer);
    });
    events.add("handshake", "every connection came");
    let i = 0;
    const pipeMain = mainReg ? conns[i++]! : main;
    const reply = conns[i++]!;
    if (mainReg) main.close();
    const channels = new Map<string, Channel>();
    const byChannel = new Map<string, Connection[]>();
    for (const [name, regs] of channelRegs) {
      const medium = transport.context.medium ?? "network";
      byChannel.set(name, conns.slice(i, i + regs.length));
      channels.set(
        name,
        settings.channels.get(name)!.context.createChannel(byChannel.get(name)!, "listen", {
          transportMedium: medium,
          peerWireExtension: peerExtensions.get(name),
        }),
      );
      i += regs.length;
    }
    return {
      transport: transport.name,
      main: pipeMain,
      reply,
      channels,
      channelConnections: byChannel,
      pairs: choice.pairs,
      peer: pipeMain.remoteAddress,
      side: "listen",
      options: settings.pipeOptions,
      path,
      events: events.events,
    };
  } catch (e) {
    for (const r of registrations) {
      r.cancel(e instanceof Error ? e : new Error(String(e)));
      r.connection.then((c) => c.close(), () => undefined);
    }
    throw hungUpOnAnswer(e, path);
  }
}

/**
 * A peer that closed the connection on an answer with no channel for CPU
 * tensors most likely refused it for that (this library's dialler does):
 * the mistake is then this side's as much as the peer's, and this side
 * hears of it only here.
 */
function hungUpOnAnswer(e: unknown, path: PathReport): unknown {
  const code = (e as { code?: string }).code;
  if (code !== ErrorCode.PEER_CLOSED && code !== ErrorCode.CONNECTION_RESET) return e;
  if (path.pairs.some((p) => sameDevice(p.local, CPU_DEVICE) && sameDevice(p.remote, CPU_DEVICE))) return e;
  const theirs = path.offeredThere?.channels ?? [];
  if (theirs.length === 0) return e;
  return new TensorPipeError(
    ErrorCode.NEGOTIATION,
    `the peer hung up on this listener's answer, which had no channel for CPU tensors in common with it (it offered ${theirs.join(", ")}; here: ${path.offeredHere.channels.join(", ") || "none registered, or none viable"}): register one both ends have (basic works everywhere)`,
    { where: (e as TensorPipeError).where, cause: e },
  );
}
