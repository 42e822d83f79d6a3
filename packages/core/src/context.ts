import { setMaxListeners } from "node:events";
import { type OperationOptions, operationSignal, raceSignal } from "./abort.js";
import { parseUrl, splitHostPort } from "./address.js";
import type { Channel, ChannelContext } from "./channel.js";
import { AUTH_ENTRY, type AuthOptions, type AuthSession, SharedSecretAuth } from "./auth.js";
import { debugLog, describeError } from "./debug.js";
import { CPU_DEVICE, deviceKey, sameDevice } from "./device.js";
import { ErrorCode, TensorPipeError, closedError, fromNativeError, protocolError } from "./errors.js";
import { Listener, type PipeAcceptor } from "./listener.js";
import {
  type Registered,
  buildBrochure,
  byPriority,
  checkAnswer,
  chooseChannels,
  chooseTransport,
  describePairs,
} from "./negotiation.js";
import { Pipe } from "./pipe.js";
import {
  type Brochure,
  type BrochureAnswer,
  ConnectionKind,
  DEFAULT_DESCRIPTOR_LIMITS,
  type DescriptorLimits,
  decodeBrochure,
  decodeBrochureAnswer,
  encodeBrochure,
  encodeBrochureAnswer,
  encodePacket,
} from "./protocol.js";
import { type ContextStats, PipeCounters, addCount } from "./stats.js";
import type { Connection, TransportContext } from "./transport.js";
import type { Viability } from "./viability.js";

const log = debugLog("negotiation");

/** A brochure in one line: each backend offered, with its descriptors. */
function describeBrochure(b: Brochure): string {
  const transports = [...b.transportDomainDescriptors].filter(([name]) => name !== AUTH_ENTRY);
  const channels = [...b.channelDeviceDescriptors].map(
    ([name, devices]) => `${name} [${[...devices.values()].map((d) => `${deviceKey(d.device)} "${d.descriptor}"`).join(", ")}]`,
  );
  return `transports ${transports.map(([n, d]) => `${n} "${d}"`).join(", ") || "none"}; channels ${channels.join(", ") || "none"}`;
}

/** Options of a Context. */
export interface ContextOptions {
  /** Sent to listeners in the first packet; upstream's context name. */
  name?: string;
  /** A listener drops connections that have not finished the handshake by then (ms). */
  handshakeTimeout?: number;
  /** Largest control frame (packet, brochure, descriptor) accepted from a peer. */
  maxControlFrameLength?: number;
  /** Payloads a peer's message may have (default 16,384); more fails the pipe with ERR_TP_PROTOCOL. */
  maxPayloads?: number;
  /** Tensors a peer's message may have (default 16,384); more fails the pipe with ERR_TP_PROTOCOL. */
  maxTensors?: number;
  /**
   * Payload and tensor bytes a peer's message may announce in all (default
   * 4 GiB); more fails the pipe with ERR_TP_PROTOCOL before anything is
   * allocated for it.
   */
  maxMessageBytes?: number;
  /**
   * Connections a listener lets wait for their first frame at once
   * (default 128), and the cap on a transport's own handshake (shm's):
   * past it the oldest that has said nothing for 250 ms is dropped, so
   * that peers that connect and say nothing cannot keep real ones out.
   */
  maxPendingHandshakes?: number;
  /**
   * Opt-in mutual authentication with a shared secret, an extension of the
   * handshake (see auth.ts); off by default, and then the bytes on the wire
   * are exactly upstream's. Both ends need it.
   */
  auth?: AuthOptions;
}

/** Options of Context.connect(): a signal or a timeout for the whole handshake (default: the context's handshakeTimeout). */
export interface ConnectOptions extends OperationOptions {}

/** A registered backend, as Context.backends() lists it. */
export interface BackendInfo {
  /** Transport or channel. */
  kind: "transport" | "channel";
  /** The name it was registered under. */
  name: string;
  /** Its priority: higher wins negotiation. */
  priority: number;
  /** Whether it can work here, and if not why. */
  viability: Viability;
}

const DEFAULT_HANDSHAKE_TIMEOUT = 10_000;
const DEFAULT_MAX_CONTROL_FRAME = 64 * 1024 * 1024;
const DEFAULT_MAX_PENDING_HANDSHAKES = 128;

/** `value`, or `fallback` when undefined; else ERR_TP_INVALID_ARG naming the option. */
function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `ContextOptions.${name} must be a positive integer, got ${String(value)}`);
  }
  return value;
}
/** Before a peer has shown it speaks the protocol, its frames stay small. */
export const MAX_HANDSHAKE_FRAME = 1024 * 1024;

/**
 * Holds the registered transports and channels, opens listeners and pipes,
 * and closes them all at the end.
 */
export class Context implements PipeAcceptor {
  /** Sent to listeners in the first packet (ContextOptions.name). */
  readonly name: string;
  /** How long a handshake may take, in ms, either side. */
  readonly handshakeTimeout: number;
  /** Largest control frame accepted from a peer. */
  readonly maxControlFrameLength: number;
  /** What a peer's message may announce (ContextOptions.maxPayloads, maxTensors, maxMessageBytes). */
  readonly descriptorLimits: Readonly<DescriptorLimits>;
  /** Connections a listener lets sit in their handshake at once. */
  readonly maxPendingHandshakes: number;
  /** The shared-secret handshake, when ContextOptions.auth is set. */
  readonly auth?: SharedSecretAuth;
  private readonly transports = new Map<string, Registered<TransportContext>>();
  private readonly channels = new Map<string, Registered<ChannelContext>>();
  private readonly listeners = new Set<Listener>();
  private readonly pipes = new Set<Pipe>();
  /** What ended pipes carried. */
  private readonly ended = new PipeCounters();
  private pipesOpened = 0;
  private closing = false;
  private closed?: Promise<void>;

  constructor(options: ContextOptions = {}) {
    this.name = options.name ?? "";
    this.handshakeTimeout = positiveInteger("handshakeTimeout", options.handshakeTimeout, DEFAULT_HANDSHAKE_TIMEOUT);
    this.maxControlFrameLength = positiveInteger("maxControlFrameLength", options.maxControlFrameLength, DEFAULT_MAX_CONTROL_FRAME);
    this.descriptorLimits = {
      maxPayloads: positiveInteger("maxPayloads", options.maxPayloads, DEFAULT_DESCRIPTOR_LIMITS.maxPayloads),
      maxTensors: positiveInteger("maxTensors", options.maxTensors, DEFAULT_DESCRIPTOR_LIMITS.maxTensors),
      maxMessageBytes: positiveInteger("maxMessageBytes", options.maxMessageBytes, DEFAULT_DESCRIPTOR_LIMITS.maxMessageBytes),
    };
    this.maxPendingHandshakes = positiveInteger("maxPendingHandshakes", options.maxPendingHandshakes, DEFAULT_MAX_PENDING_HANDSHAKES);
    if (options.auth) this.auth = new SharedSecretAuth(options.auth);
  }

  /** Higher priority wins when both ends have several transports in common. */
  registerTransport(priority: number, name: string, context: TransportContext): void {
    this.checkRegistration(name, this.transports);
    this.transports.set(name, { priority, name, context });
  }

  /** Higher priority wins for a device pair both ends can use with several channels. */
  registerChannel(priority: number, name: string, context: ChannelContext): void {
    this.checkRegistration(name, this.channels);
    this.channels.set(name, { priority, name, context });
  }

  private checkRegistration(name: string, into: Map<string, unknown>): void {
    if (this.closing) throw closedError("context");
    if (!/^[A-Za-z0-9_.-]+$/.test(name)) {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `backend name "${name}" must be [A-Za-z0-9_.-]+`);
    }
    if (into.has(name)) throw new TensorPipeError(ErrorCode.INVALID_ARG, `"${name}" is already registered`);
  }

  /** Every registered backend with its priority and whether it can run here. */
  backends(): BackendInfo[] {
    return [
      ...byPriority(this.transports.values()).map((t) => ({
        kind: "transport" as const,
        name: t.name,
        priority: t.priority,
        viability: t.context.isViable(),
      })),
      ...byPriority(this.channels.values()).map((c) => ({
        kind: "channel" as const,
        name: c.name,
        priority: c.priority,
        viability: c.context.isViable(),
      })),
    ];
  }

  private transportForScheme(scheme: string): Registered<TransportContext> {
    const t =
      this.transports.get(scheme) ??
      [...this.transports.values()].find((r) => r.context.aliases?.includes(scheme));
    if (!t) {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        `no transport registered for "${scheme}://" (have: ${[...this.transports.keys()].join(", ") || "none"})`,
      );
    }
    const v = t.context.isViable();
    if (!v.viable) throw new TensorPipeError(ErrorCode.NOT_VIABLE, `transport "${t.name}" cannot run here: ${v.reason}`);
    return t;
  }

  /** Listens on each URL ("uv://127.0.0.1:0", ...); port 0 picks a free port. */
  async listen(urls: string | readonly string[]): Promise<Listener> {
    if (this.closing) throw closedError("context");
    const listener = new Listener(this);
    try {
      for (const url of typeof urls === "string" ? [urls] : urls) {
        const { scheme, address } = parseUrl(url);
        const t = this.transportForScheme(scheme);
        if (listener.listeningTransports().has(t.name)) {
          throw new TensorPipeError(ErrorCode.INVALID_ARG, `listener has two addresses for transport "${t.name}"`);
        }
        const tl = await t.context.listen(
          address,
          (c) => listener.handleConnection(t.name, c),
          (e) => listener.reportAcceptError(e),
          { handshakeTimeout: this.handshakeTimeout, maxPendingHandshakes: this.maxPendingHandshakes },
        );
        listener.addTransportListener(t.name, scheme, tl);
      }
    } catch (e) {
      listener.close();
      throw e;
    }
    this.listeners.add(listener);
    return listener;
  }

  /** Opens a pipe; resolves once the handshake with the listener is complete. */
  async connect(url: string, options?: ConnectOptions): Promise<Pipe> {
    if (this.closing) throw closedError("context");
    const { scheme, address } = parseUrl(url);
    const transport = this.transportForScheme(scheme);
    const signal = operationSignal({ timeout: this.handshakeTimeout, ...options });
    // Every connection of the pipe (a channel may want many) is opened
    // under this one signal, each with its own listener until it is open.
    if (signal) setMaxListeners(0, signal);
    const opened: Connection[] = [];
    const abandon = (err: TensorPipeError) => {
      for (const c of opened) c.close(err);
    };
    const handshake = async (): Promise<Pipe> => {
      const main = await transport.context.connect(address, { signal });
      opened.push(main);
      if (signal?.aborted) throw new TensorPipeError(ErrorCode.ABORTED, "connect was aborted");
      const brochure = buildBrochure(byPriority(this.transports.values()), byPriority(this.channels.values()));
      const hello = this.auth?.hello();
      if (hello) brochure.transportDomainDescriptors.set(AUTH_ENTRY, hello.entry);
      if (log.enabled) {
        log("connect to %s over %s: offering %s", url, transport.name, describeBrochure(brochure));
        for (const b of this.backends()) if (!b.viability.viable) log("not offering %s %s: %s", b.kind, b.name, b.viability.reason);
      }
      const exchange = async (frames: Uint8Array[]): Promise<BrochureAnswer> => {
        const sent = main.write(frames);
        try {
          const [, bytes] = await Promise.all([sent, main.read(MAX_HANDSHAKE_FRAME)]);
          return decodeBrochureAnswer(bytes);
        } catch (e) {
          const err = fromNativeError(e, url);
          if (err.code === ErrorCode.PEER_CLOSED) {
            throw new TensorPipeError(
              ErrorCode.NEGOTIATION,
              `peer closed the connection during the handshake: not a TensorPipe listener, or no transport in common${
                this.auth ? ", or the shared secrets differ" : ", or it requires authentication (ContextOptions.auth)"
              }, or it could not take the connection (see its connectionError events)`,
              { where: url, cause: err },
            );
          }
          throw err;
        }
      };
      let answer = await exchange([encodePacket({ kind: "spontaneous", contextName: this.name }), encodeBrochure(brochure)]);
      let session: AuthSession | undefined;
      if (hello) {
        const reply = this.auth!.answerChallenge(hello.client, answer);
        session = reply.session;
        brochure.transportDomainDescriptors.set(AUTH_ENTRY, reply.entry);
        answer = await exchange([encodeBrochure(brochure)]);
      }
      if (answer.transport === AUTH_ENTRY) {
        throw new TensorPipeError(ErrorCode.PERMISSION_DENIED, "listener requires authentication: set ContextOptions.auth with its shared secret", {
          where: url,
        });
      }
      if (log.enabled) {
        log("%s answered: transport %s at %s, channels %s", url, answer.transport, answer.address, describePairs(answer.channelForDevicePair));
      }
      const viableChannels = this.viableContexts(this.channels);
      const pairs = checkAnswer(this.viableContexts(this.transports), viableChannels, answer);
      // Every CPU tensor either way would otherwise fail on its first write.
      const cpuChannels = [...viableChannels].filter(([, c]) => c.deviceDescriptors().some((d) => sameDevice(d.device, CPU_DEVICE)));
      if (cpuChannels.length > 0 && !pairs.some((p) => sameDevice(p.local, CPU_DEVICE) && sameDevice(p.remote, CPU_DEVICE))) {
        throw new TensorPipeError(
          ErrorCode.NEGOTIATION,
          `no channel for CPU tensors in common with the listener: this side offers ${cpuChannels.map(([name]) => name).join(", ")}; register one that both ends have (basic works everywhere)`,
          { where: url },
        );
      }
      const chosen = this.transports.get(answer.transport)!.context;
      // The listener names itself as it sees itself; where that is the
      // address dialled already (a link-local one, say, whose scope only
      // means something here), keep dialling it as this side wrote it.
      const followUp = answer.transport === transport.name && sameEndpoint(answer.address, address) ? address : answer.address;
      const openRequested = async (id: bigint): Promise<Connection> => {
        const c = await chosen.connect(followUp, { signal });
        opened.push(c);
        const packet = encodePacket({ kind: "requested", registrationId: id });
        await c.write(session ? [packet, this.auth!.connectionProof(session, id)] : [packet]);
        return c;
      };
      const mainId = answer.transportRegistrationIds.get(ConnectionKind.MAIN);
      const replyId = answer.transportRegistrationIds.get(ConnectionKind.REPLY);
      if (replyId === undefined) throw protocolError("brochure answer registered no reply connection", url);
      const [newMain, reply, ...channelConnections] = await Promise.all([
        mainId === undefined ? Promise.resolve(main) : openRequested(mainId),
        openRequested(replyId),
        ...[...answer.channelRegistrationIds.values()].flat().map(openRequested),
      ]);
      if (newMain !== main) main.close();
      const channels = new Map<string, Channel>();
      let next = 0;
      for (const [name, ids] of answer.channelRegistrationIds) {
        const conns = channelConnections.slice(next, next + ids.length);
        next += ids.length;
        channels.set(name, this.channels.get(name)!.context.createChannel(conns, "connect", { transportMedium: chosen.medium ?? "network" }));
      }
      return this.adopt(
        new Pipe({
          transport: answer.transport,
          main: newMain!,
          reply: reply!,
          channels,
          pairs,
          peer: url,
          side: "connect",
          options: { maxDescriptorLength: this.maxControlFrameLength, limits: this.descriptorLimits },
        }),
      );
    };
    return raceSignal(handshake(), signal, `connect to ${url}`, abandon).catch((e) => {
      const err = fromNativeError(e, url);
      if (log.enabled) log("connect to %s failed: %s", url, describeError(err));
      abandon(err);
      throw err;
    });
  }

  private viableContexts<T extends { isViable(): Viability }>(from: Map<string, Registered<T>>): Map<string, T> {
    const out = new Map<string, T>();
    for (const [name, r] of from) if (r.context.isViable().viable) out.set(name, r.context);
    return out;
  }

  /** @internal The listening side of the handshake, after a SpontaneousConnection packet. */
  async acceptPipe(listener: Listener, cameOn: string, main: Connection): Promise<Pipe> {
    let brochure = decodeBrochure(await main.read(MAX_HANDSHAKE_FRAME));
    let session: AuthSession | undefined;
    if (this.auth) {
      const challenge = this.auth.challenge(brochure.transportDomainDescriptors.get(AUTH_ENTRY));
      session = challenge.session;
      const [, bytes] = await Promise.all([main.write([encodeBrochureAnswer(challenge.answer)]), main.read(MAX_HANDSHAKE_FRAME)]);
      brochure = decodeBrochure(bytes);
      this.auth.verifyProof(session, brochure.transportDomainDescriptors.get(AUTH_ENTRY));
    }
    brochure.transportDomainDescriptors.delete(AUTH_ENTRY);
    const from = main.remoteAddress;
    if (log.enabled) log("%s over %s offers %s", from, cameOn, describeBrochure(brochure));
    const note = log.enabled ? (name: string, why: string) => log("%s: %s: %s", from, name, why) : undefined;
    const transport = chooseTransport(byPriority(this.transports.values()), listener.listeningTransports(), brochure, note);
    if (!transport) {
      throw new TensorPipeError(
        ErrorCode.NEGOTIATION,
        `no transport in common (peer has: ${[...brochure.transportDomainDescriptors.keys()].join(", ")})`,
        { where: main.remoteAddress },
      );
    }
    const choice = chooseChannels(byPriority(this.channels.values()), brochure, note);
    const registrations: ReturnType<Listener["register"]>[] = [];
    const transportRegistrationIds = new Map<number, bigint>();
    const register = () => {
      const r = listener.register(session);
      registrations.push(r);
      return r;
    };
    const mainReg = transport.name !== cameOn ? register() : undefined;
    if (mainReg) transportRegistrationIds.set(ConnectionKind.MAIN, mainReg.id);
    const replyReg = register();
    transportRegistrationIds.set(ConnectionKind.REPLY, replyReg.id);
    const channelRegs = new Map<string, ReturnType<Listener["register"]>[]>();
    for (const c of choice.selected) {
      channelRegs.set(c.name, Array.from({ length: c.context.numConnectionsNeeded() }, register));
    }
    try {
      await main.write([
        encodeBrochureAnswer({
          transport: transport.name,
          address: listener.transportAddress(transport.name)!,
          transportRegistrationIds,
          transportDomainDescriptor: transport.context.domainDescriptor(),
          channelRegistrationIds: new Map([...channelRegs].map(([name, regs]) => [name, regs.map((r) => r.id)])),
          channelDeviceDescriptors: choice.deviceDescriptors,
          channelForDevicePair: choice.pairs,
        }),
      ]);
      // The peer gives up the first connection once it has opened its
      // replacement, maybe before the others arrive: only a deadline counts then.
      let timer: NodeJS.Timeout | undefined;
      const givenUp = mainReg
        ? new Promise<never>((_, reject) => {
            timer = setTimeout(
              () => reject(new TensorPipeError(ErrorCode.TIMEOUT, "peer did not open the connections it was given ids for")),
              this.handshakeTimeout,
            );
          })
        : main.closed.then((e) => Promise.reject(e ?? closedError("connection")));
      givenUp.catch(() => undefined);
      const conns = await Promise.race([Promise.all(registrations.map((r) => r.connection)), givenUp]).finally(() =>
        clearTimeout(timer),
      );
      let i = 0;
      const pipeMain = mainReg ? conns[i++]! : main;
      const reply = conns[i++]!;
      if (mainReg) main.close();
      const channels = new Map<string, Channel>();
      for (const [name, regs] of channelRegs) {
        channels.set(
          name,
          this.channels.get(name)!.context.createChannel(conns.slice(i, i + regs.length), "listen", { transportMedium: transport.context.medium ?? "network" }),
        );
        i += regs.length;
      }
      return this.adopt(
        new Pipe({
          transport: transport.name,
          main: pipeMain,
          reply,
          channels,
          pairs: choice.pairs,
          peer: pipeMain.remoteAddress,
          side: "listen",
          options: { maxDescriptorLength: this.maxControlFrameLength, limits: this.descriptorLimits },
        }),
      );
    } catch (e) {
      for (const r of registrations) {
        r.cancel();
        r.connection.then((c) => c.close(), () => undefined);
      }
      throw e;
    }
  }

  private adopt(pipe: Pipe): Pipe {
    if (this.closing) {
      pipe.close();
      throw closedError("context");
    }
    this.pipes.add(pipe);
    this.pipesOpened++;
    pipe.closed.then(() => {
      this.pipes.delete(pipe);
      this.ended.add(pipe.counters);
    });
    return pipe;
  }

  /** What every pipe of this context carried, open and ended, and what its listeners dropped. */
  stats(): ContextStats {
    const sum = new PipeCounters();
    sum.add(this.ended);
    for (const p of this.pipes) sum.add(p.counters);
    const connectionErrors = new Map<string, number>();
    for (const l of this.listeners) for (const [code, n] of l.connectionErrors) addCount(connectionErrors, code, n);
    return {
      ...sum.snapshot(),
      pipesOpened: this.pipesOpened,
      pipesOpen: this.pipes.size,
      connectionErrors: Object.fromEntries(connectionErrors),
    };
  }

  /**
   * Closes every listener and pipe of this context (their pending
   * operations reject with ERR_TP_CLOSED), then the backends.
   */
  async close(): Promise<void> {
    if (!this.closing) {
      this.closing = true;
      this.closed = (async () => {
        for (const l of this.listeners) l.close();
        const pipes = [...this.pipes];
        for (const p of pipes) p.close();
        await Promise.all(pipes.map((p) => p.closed));
        await Promise.all([
          ...[...this.transports.values()].map((t) => t.context.close()),
          ...[...this.channels.values()].map((c) => c.context.close()),
        ]);
      })();
    }
    return this.closed;
  }

  /** Resolves once close() has finished: every pipe ended, every backend closed. */
  join(): Promise<void> {
    return this.closed ?? this.close();
  }
}

/** Same host (scope aside) and port, for addresses of the form host:port. */
function sameEndpoint(a: string, b: string): boolean {
  try {
    const x = splitHostPort(a);
    const y = splitHostPort(b);
    return x.port === y.port && x.host.split("%")[0]!.toLowerCase() === y.host.split("%")[0]!.toLowerCase();
  } catch {
    return a === b;
  }
}
