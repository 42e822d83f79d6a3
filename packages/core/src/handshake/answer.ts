/**
 * The listening side of the handshake (docs/wire-protocol.md), after a
 * SpontaneousConnection packet: reads the offer (after its proof, under
 * authentication), chooses or refuses, answers, and waits for the
 * connections its answer asked for. Returns the pipe's parts.
 */
import type { AuthSession } from "../auth.js";
import { ErrorCode, TensorPipeError, closedError } from "../errors.js";
import { HandshakeEvents } from "../flight-recorder.js";
import { type ChannelChoice, type Registered, byPriority, carriesCpuTensors, chooseChannels, chooseTransport } from "../negotiation.js";
import {
  MAX_VERDICTS,
  type OfferedBackends,
  type PathReport,
  type PathVerdict,
  boundedVerdicts,
  fromPeer,
  pathHeadline,
  peerReport,
  reportJson,
} from "../path-report.js";
import type { PipeParts } from "../pipe/parts.js";
import { ConnectionKind, decodeBrochure, encodeBrochureAnswer } from "../protocol/handshake.js";
import type { Registration, Registrations } from "../registrations.js";
import type { Connection, TransportContext } from "../transport.js";
import { assemble } from "./assembly.js";
import { WIRE_EXTENSIONS_ENTRY, putName, putReport, readExtensions, reportedName, stripExtensions } from "./extensions.js";
import { hungUpOnAnswer, refusal } from "./failures.js";
import { type HandshakeSettings, MAX_HANDSHAKE_FRAME, log, recording, restricted } from "./settings.js";
import { choiceVerdicts, describeBrochure, describeOffer, leftOut, notRegistered, offeredIn, pathNote, verdictLine, withPeerReasons } from "./verdicts.js";

/** How long a listener still waits for the connections it asked for once the peer closed the first one. */
const CLOSED_PEER_GRACE_MS = 1000;

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

/**
 * The listening side, after a SpontaneousConnection packet on `main` (which
 * came on transport `cameOn`, naming the peer's context `contextName`):
 * reads the offer, chooses, answers, and waits for the connections it
 * registered.
 */
export function answer(settings: HandshakeSettings, main: Connection, cameOn: string, contextName: string, listening: ListeningSide): Promise<PipeParts> {
  const events = new HandshakeEvents(settings.pipeOptions.flightRecorder > 0);
  events.add("handshake", `connection from ${main.remoteAddress} over ${cameOn}`);
  return recording(events, async () => {
    // The offer is read and chosen from in a function of its own: nothing
    // holds it (up to MAX_HANDSHAKE_ENTRIES entries) while the peer opens
    // the connections asked for.
    const chosen = await chooseForOffer(settings, main, cameOn, contextName, listening, events);
    return await awaitConnections(chosen, main, cameOn, listening, events);
  });
}

/** What a listener chose for a peer's offer, all it keeps of that offer. */
interface AnswerChoice {
  /** The settings as this listener's path restricts them. */
  settings: HandshakeSettings;
  session?: AuthSession;
  transport: Registered<TransportContext>;
  choice: ChannelChoice;
  path: PathReport;
  /** The peer's wire extension of each channel. */
  peerExtensions: ReadonlyMap<string, string>;
  /** The dialler's name, where it gave one (and proved it, under authentication). */
  peerName: string | undefined;
}

/** Reads the peer's offer (after its proof, under authentication) and chooses, or refuses it. */
async function chooseForOffer(
  all: HandshakeSettings,
  main: Connection,
  cameOn: string,
  contextName: string,
  listening: ListeningSide,
  events: HandshakeEvents,
): Promise<AnswerChoice> {
  const settings = restricted(all);
  const { auth } = settings;
  let brochure = decodeBrochure(await main.read(MAX_HANDSHAKE_FRAME));
  let session: AuthSession | undefined;
  let peerName: string | undefined = contextName;
  if (auth) {
    const challenge = auth.challenge(readExtensions(brochure.channelDeviceDescriptors, brochure.transportDomainDescriptors).auth);
    session = challenge.session;
    const [, bytes] = await Promise.all([main.write([encodeBrochureAnswer(challenge.answer)]), main.read(MAX_HANDSHAKE_FRAME)]);
    brochure = decodeBrochure(bytes);
    const proved = readExtensions(brochure.channelDeviceDescriptors, brochure.transportDomainDescriptors);
    auth.verifyProof(session, proved.auth);
    peerName = auth.provenName(session, "dialler", contextName, proved.name.proof);
  }
  const extensions = readExtensions(brochure.channelDeviceDescriptors);
  stripExtensions(brochure);
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
  const dialerSaid = peerReport(extensions.report);
  const offeredHere: OfferedBackends = {
    transports: [...settings.transports.values()].filter((t) => listening.transports.has(t.name) && t.context.isViable().viable).map((t) => t.name),
    channels: [...settings.channels.values()].filter((c) => c.context.isViable().viable).map((c) => c.name),
  };
  const ownVerdicts = () => verdicts.filter((v) => v.by === "here");
  // A dialler that asked for reasons (ours; upstream never does) hears why
  // before the connection closes, instead of guessing from the close.
  const refuse = async (kind: PathVerdict["kind"], message: string): Promise<never> => {
    const err = new TensorPipeError(ErrorCode.NEGOTIATION, message, { where: from });
    if (dialerSaid) await main.write([encodeBrochureAnswer(refusal(offeredHere, ownVerdicts(), kind))]).catch(() => undefined);
    throw err;
  };
  const transport = chooseTransport(byPriority(settings.transports.values()), listening.transports, brochure, note);
  if (!transport) {
    const why = choiceVerdicts(verdicts, "transport");
    return refuse(
      "transport",
      `no transport in common (peer has: ${offeredThere.transports.join(", ") || "none"}; here: ${why || "none allowed"})${pathNote(settings)}`,
    );
  }
  const choice = chooseChannels(byPriority(settings.channels.values()), brochure, note);
  if (settings.path && !carriesCpuTensors(choice.pairs)) {
    const why = choiceVerdicts(verdicts, "channel");
    return refuse("channel", `no channel for CPU tensors (here: ${why || "none allowed"})${pathNote(settings)}`);
  }
  if (uncounted > 0)
    verdicts.push({
      kind: "channel",
      name: `(${uncounted} more)`,
      by: "here",
      outcome: "descriptors differ",
      reason: `${uncounted} more verdicts on the peer's devices, not kept`,
    });
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
  if (dialerSaid) {
    putReport(choice.deviceDescriptors, reportJson(offeredHere, ownVerdicts()));
    if (settings.name !== "") putName(choice.deviceDescriptors, settings.name, session && auth?.nameProof(session, "listener", settings.name));
  }
  if (extensions.wire.size === 0) choice.deviceDescriptors.delete(WIRE_EXTENSIONS_ENTRY);
  return { settings, session, transport, choice, path, peerExtensions: extensions.wire, peerName: reportedName(peerName) };
}

/** Answers with `chosen`, and waits for the connections the answer asked for. */
async function awaitConnections(
  { settings, session, transport, choice, path, peerExtensions, peerName }: AnswerChoice,
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
    listening.answered(main);
    events.add("handshake", `answered; waiting for the ${registrations.length} connection(s) asked for`);
    const conns = await allCame(registrations, main, mainReg !== undefined, settings.handshakeTimeout);
    events.add("handshake", "every connection came");
    const pipeMain = mainReg ? conns.shift()! : main;
    const reply = conns.shift()!;
    if (mainReg) main.close();
    return assemble({
      side: "listen",
      settings,
      transport,
      main: pipeMain,
      reply,
      channels: [...channelRegs].map(([name, regs]) => [name, regs.length] as const),
      channelConnections: conns,
      peerExtensions,
      pairs: choice.pairs,
      peer: pipeMain.remoteAddress,
      peerName,
      path,
      events: events.events,
    });
  } catch (e) {
    for (const r of registrations) {
      r.cancel(e instanceof Error ? e : new Error(String(e)));
      r.connection.then(
        (c) => c.close(),
        () => undefined,
      );
    }
    throw hungUpOnAnswer(e, path);
  }
}

/**
 * The connections asked for, once all have come. The peer gives up the
 * first connection once it has opened its replacement (`replaced`), maybe
 * before the others arrive: only a deadline counts then. Where the first
 * connection stays the pipe's, its close ends the wait, but not at once: a
 * peer that closes its pipe as soon as connect() resolved has opened every
 * connection asked for, which are on their way, and its pipe is accepted
 * here (and ends at once) like any other.
 */
async function allCame(registrations: readonly Registration[], main: Connection, replaced: boolean, timeout: number): Promise<Connection[]> {
  let timer: NodeJS.Timeout | undefined;
  let waiting = true;
  const givenUp = new Promise<never>((_, reject) => {
    const giveUpIn = (ms: number, err: Error) => {
      if (waiting) timer = setTimeout(() => reject(err), ms);
    };
    if (replaced) giveUpIn(timeout, new TensorPipeError(ErrorCode.TIMEOUT, "peer did not open the connections it was given ids for"));
    else main.closed.then((e) => giveUpIn(Math.min(CLOSED_PEER_GRACE_MS, timeout), e ?? closedError("connection")));
  });
  givenUp.catch(() => undefined);
  try {
    return await Promise.race([Promise.all(registrations.map((r) => r.connection)), givenUp]);
  } finally {
    waiting = false;
    clearTimeout(timer);
  }
}
