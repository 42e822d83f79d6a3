/**
 * The connecting side of the handshake (docs/wire-protocol.md): dials,
 * offers what this side has, reads the listener's answer and opens the
 * connections it asks for. Returns the pipe's parts; the Context makes
 * and keeps the Pipe.
 */
import type { AuthSession } from "../auth.js";
import { CPU_DEVICE, deviceKey, sameDevice } from "../device.js";
import { ErrorCode, TensorPipeError, fromNativeError, protocolError } from "../errors.js";
import { HandshakeEvents } from "../flight-recorder.js";
import { type Registered, buildBrochure, byPriority, carriesCpuTensors, checkAnswer, localDeviceDescriptors } from "../negotiation.js";
import { type PathReport, type PathVerdict, boundedVerdicts, describePathReport, fromPeer, pathHeadline, peerReport, reportJson } from "../path-report.js";
import { peerExcerpt } from "../peer-text.js";
import type { PipeParts } from "../pipe/parts.js";
import {
  type Brochure,
  type BrochureAnswer,
  ConnectionKind,
  type DevicePairChoice,
  decodeBrochureAnswer,
  encodeBrochure,
  encodePacket,
} from "../protocol/handshake.js";
import type { Connection, TransportContext } from "../transport.js";
import { ListenerProof, checkAnsweredAddress, followUpAddress } from "./address-policy.js";
import { assemble } from "./assembly.js";
import { AUTH_ENTRY, putAuth, putNameProof, putReport, readExtensions, reportedName } from "./extensions.js";
import { REFUSED, duringHandshake, noCpuChannel, refused } from "./failures.js";
import { type HandshakeSettings, MAX_HANDSHAKE_FRAME, log, recording, restricted, viable } from "./settings.js";
import { describeBrochure, describeOffer, inferredVerdicts, leftOut, offeredIn } from "./verdicts.js";

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
export function dial(settings: HandshakeSettings, target: DialTarget): Promise<PipeParts> {
  const events = new HandshakeEvents(settings.pipeOptions.flightRecorder > 0);
  events.add("handshake", `dial ${target.url} over ${target.transport.name}`);
  return recording(events, () => new Dialling(settings, target, events).run());
}

/** One attempt to dial, step by step. */
class Dialling {
  /** The settings as this side's path restricts them. */
  private readonly settings: HandshakeSettings;
  private readonly url: string;
  private main!: Connection;
  private session?: AuthSession;
  /** The channel of each device pair, as the answer chose them. */
  private pairs: DevicePairChoice[] = [];

  constructor(
    private readonly all: HandshakeSettings,
    private readonly target: DialTarget,
    private readonly events: HandshakeEvents,
  ) {
    this.settings = restricted(all);
    this.url = target.url;
  }

  async run(): Promise<PipeParts> {
    const { transport, address, signal, opened } = this.target;
    try {
      this.main = await transport.context.connect(address, { signal });
    } catch (e) {
      throw duringHandshake(this.url, fromNativeError(e, this.url), this.settings.auth !== undefined);
    }
    opened.push(this.main);
    if (signal?.aborted) throw new TensorPipeError(ErrorCode.ABORTED, "connect was aborted");
    const { brochure, path } = this.offer();
    const answer = await this.offered(brochure);
    const report = this.answered(answer, brochure, path);
    return this.openRequested(answer, report);
  }

  /** What this side offers, and what it left out and why. */
  private offer(): { brochure: Brochure; path: { offeredHere: PathReport["offeredHere"]; ownVerdicts: PathVerdict[] } } {
    const { settings, events } = this;
    const brochure = buildBrochure(byPriority(settings.transports.values()), byPriority(settings.channels.values()));
    const offeredHere = offeredIn(brochure);
    const ownVerdicts = leftOut(this.all, settings, true);
    // Every brochure asks for the listener's reasons: upstream passes over the
    // entry as over any channel it lacks, a listener of ours answers with its
    // own, and each end then knows whether the other is ours.
    putReport(brochure.channelDeviceDescriptors, reportJson(offeredHere, ownVerdicts));
    if (events.enabled) events.add("handshake", `connected; offering ${describeOffer(offeredHere)}`);
    if (log.enabled) {
      log("connect to %s over %s: offering %s", this.url, this.target.transport.name, describeBrochure(brochure));
      for (const v of ownVerdicts) log("not offering %s %s: %s", v.kind, v.name, v.reason);
    }
    return { brochure, path: { offeredHere, ownVerdicts } };
  }

  /** Sends the offer (proving this side first, under authentication) and reads the listener's answer. */
  private async offered(brochure: Brochure): Promise<BrochureAnswer> {
    const { auth } = this.settings;
    const hello = auth?.hello();
    if (hello) putAuth(brochure, hello.entry);
    let answer = await this.exchange([encodePacket({ kind: "spontaneous", contextName: this.settings.name }), encodeBrochure(brochure)]);
    if (hello) {
      const reply = auth!.answerChallenge(hello.client, answer);
      this.session = reply.session;
      putAuth(brochure, reply.entry);
      if (this.settings.name !== "") putNameProof(brochure, auth!.nameProof(reply.session, "dialler", this.settings.name));
      answer = await this.exchange([encodeBrochure(brochure)]);
    }
    return answer;
  }

  private async exchange(frames: Uint8Array[]): Promise<BrochureAnswer> {
    const sent = this.main.write(frames);
    try {
      const [, bytes] = await Promise.all([sent, this.main.read(MAX_HANDSHAKE_FRAME)]);
      return decodeBrochureAnswer(bytes);
    } catch (e) {
      const err = fromNativeError(e, this.url);
      if (err.code !== ErrorCode.PROTOCOL) throw duringHandshake(this.url, err, this.settings.auth !== undefined);
      // An HTTP server's "HTTP/1.1" read as a frame length, say.
      throw new TensorPipeError(ErrorCode.PROTOCOL, `the answer is not a TensorPipe listener's: is this the address of one? (${err.message})`, {
        where: this.url,
        cause: err,
      });
    }
  }

  /** Checks the listener's answer, and tells the pipe's path from it. */
  private answered(answer: BrochureAnswer, brochure: Brochure, offer: { offeredHere: PathReport["offeredHere"]; ownVerdicts: PathVerdict[] }): PathReport {
    const { settings, url, events } = this;
    if (answer.transport === AUTH_ENTRY) {
      throw new TensorPipeError(ErrorCode.PERMISSION_DENIED, "listener requires authentication: set ContextOptions.auth with its shared secret", {
        where: url,
      });
    }
    if (answer.transport === REFUSED) throw refused(answer, url, settings);
    checkAnsweredAddress(answer, url);
    const viableChannels = viable(settings.channels);
    const pairs = checkAnswer(viable(settings.transports), viableChannels, answer);
    this.pairs = pairs;
    const listenerSaid = peerReport(readExtensions(answer.channelDeviceDescriptors).report);
    const path: PathReport = {
      side: "connect",
      transport: answer.transport,
      pairs,
      offeredHere: offer.offeredHere,
      offeredThere: listenerSaid?.offered,
      peerReported: listenerSaid !== undefined,
      verdicts: boundedVerdicts([...offer.ownVerdicts, ...(listenerSaid ? fromPeer(listenerSaid.verdicts) : inferredVerdicts(brochure, answer))]),
    };
    if (events.enabled) events.add("path", `answered from ${answer.address}: ${pathHeadline(path)}`);
    if (log.enabled) {
      const [first, ...rest] = describePathReport(path).split("\n");
      log("%s answered, at %s: %s", url, answer.address, first);
      for (const line of rest) log("%s: %s", url, line);
    }
    const cpuChannels = [...viableChannels].filter(([, c]) => c.deviceDescriptors().some((d) => sameDevice(d.device, CPU_DEVICE)));
    if (cpuChannels.length > 0 && !carriesCpuTensors(pairs)) {
      throw noCpuChannel(
        settings,
        cpuChannels.map(([name, c]) => ({ name, descriptor: localDeviceDescriptors(c).get(deviceKey(CPU_DEVICE))?.descriptor })),
        url,
        listenerSaid && fromPeer(listenerSaid.verdicts),
      );
    }
    return path;
  }

  /** Opens the connections the answer asked for, each proved and introduced, and puts the pipe together. */
  private async openRequested(answer: BrochureAnswer, path: PathReport): Promise<PipeParts> {
    const { settings, url, events, main, session } = this;
    const { transport, address, signal, opened } = this.target;
    const { auth } = settings;
    const chosen = settings.transports.get(answer.transport)!;
    const followUp = followUpAddress(answer, transport, chosen.context, address, main, url);
    if (followUp !== answer.address) {
      if (events.enabled) events.add("handshake", `the listener named ${answer.address}; its connections go where it was reached`);
      if (log.enabled) log("%s named itself %s: its connections go to %s, where it was reached", url, answer.address, followUp);
    }
    const proof = new ListenerProof(answer, transport, chosen.context, main, url);
    const extensions = readExtensions(answer.channelDeviceDescriptors);
    const peerName = reportedName(session ? auth!.provenName(session, "listener", extensions.name.name, extensions.name.proof) : extensions.name.name);
    const open = async (id: bigint): Promise<Connection> => {
      const c = await chosen.context.connect(followUp, { signal }).catch((e: unknown) => {
        // The address is the listener's word: one that is not an address at all is its fault, not the caller's.
        if (followUp === answer.address && (e as { code?: string }).code === ErrorCode.INVALID_ARG) {
          throw protocolError(`the listener answered with ${peerExcerpt(answer.address)}, which is not an address ${answer.transport} can dial`, url);
        }
        // Dropped in the transport's own handshake (shm's), as the first one would be.
        throw duringHandshake(url, fromNativeError(e, url), auth !== undefined, true);
      });
      opened.push(c);
      proof.prove(c);
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
    const firstNew = mainId === undefined ? undefined : await open(mainId);
    const [pipeMain, reply, ...channelConnections] = await Promise.all([
      firstNew ?? main,
      open(replyId),
      ...[...answer.channelRegistrationIds.values()].flat().map(open),
    ]);
    if (pipeMain !== main) main.close();
    events.add("handshake", `opened the ${2 + channelConnections.length} connection(s) asked for`);
    return assemble({
      side: "connect",
      settings,
      transport: chosen,
      main: pipeMain!,
      reply: reply!,
      channels: [...answer.channelRegistrationIds].map(([name, ids]) => [name, ids.length] as const),
      channelConnections,
      peerExtensions: extensions.wire,
      pairs: this.pairs,
      peer: url,
      peerName,
      path,
      events: events.events,
    });
  }
}
