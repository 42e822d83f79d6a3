import { setMaxListeners } from "node:events";
import { Deadline, type OperationOptions, checkOptionsObject, operationDeadline } from "./abort.js";
import { parseUrl } from "./address.js";
import { type AuthOptions, SharedSecretAuth } from "./auth.js";
import type { ChannelContext } from "./channel.js";
import { debugLog, describeError } from "./debug.js";
import { DialGate } from "./dial-gate.js";
import { describeValue } from "./describe-value.js";
import { OptionChecks } from "./option-checks.js";
import { ErrorCode, TensorPipeError, closedError, fromNativeError } from "./errors.js";
import { dial } from "./handshake/dial.js";
import type { HandshakeSettings } from "./handshake/settings.js";
import { Listener } from "./listener.js";
import { type Registered, byPriority } from "./negotiation.js";
import { type PathPolicy, checkListenedTransports, checkPathPolicy } from "./path-policy.js";
import { Pipe } from "./pipe/pipe.js";
import type { PipeParts } from "./pipe/parts.js";
import { DEFAULT_DESCRIPTOR_LIMITS, type DescriptorLimits } from "./protocol/message.js";
import { type ContextStats, PipeCounters, addCount } from "./stats.js";
import type { FlightEvent } from "./flight-recorder.js";
import type { Connection, TransportContext } from "./transport.js";
import type { Viability } from "./viability.js";
import { type WarmUpReport, pairName, warmUp } from "./warm-up.js";

const log = debugLog("negotiation");

/** Options of a Context. */
export interface ContextOptions {
  /** This context's name, as its peers read it (Pipe.peerName): upstream's context name, sent in the first packet. */
  name?: string | undefined;
  /** A listener drops connections that have not finished the handshake by then (ms). */
  handshakeTimeout?: number | undefined;
  /** Largest control frame (packet, brochure, descriptor) accepted from a peer. */
  maxControlFrameLength?: number | undefined;
  /** Payloads a peer's message may have (default 16,384); more fails the pipe with ERR_TP_PROTOCOL. */
  maxPayloads?: number | undefined;
  /** Tensors a peer's message may have (default 16,384); more fails the pipe with ERR_TP_PROTOCOL. */
  maxTensors?: number | undefined;
  /**
   * Payload and tensor bytes a peer's message may announce in all (default
   * 4 GiB); more fails the pipe with ERR_TP_PROTOCOL before anything is
   * allocated for it.
   */
  maxMessageBytes?: number | undefined;
  /**
   * Connections a listener lets wait in their handshakes at once (default
   * 128), and the cap on a transport's own handshake (shm's): past it the
   * oldest that has waited on its peer past its grace is dropped (250 ms
   * for one that said nothing, 1 s for one that spoke and stalled), so
   * that peers that connect and say nothing, or a few bytes, cannot keep
   * real ones out.
   */
  maxPendingHandshakes?: number | undefined;
  /**
   * Opt-in mutual authentication with a shared secret, an extension of the
   * handshake (see auth.ts); off by default, and then the bytes on the wire
   * are exactly upstream's. Both ends need it.
   */
  auth?: AuthOptions | undefined;
  /**
   * Events each pipe's flight recorder keeps (default 64; 0 turns it off):
   * the handshake's steps, the path, each message's size and time, errors.
   * `pipe.flightRecord()` and `context.flightRecords()` give them; a failed
   * pipe's or handshake's error carries them as `flightRecord`.
   */
  flightRecorder?: number | undefined;
}

/** Options of Context.connect(): a signal or a timeout for the whole handshake (default: the context's handshakeTimeout). */
export interface ConnectOptions extends OperationOptions {
  /**
   * The backends this pipe may use, by registered name: only
   * `transports`, only `channels`, never `forbid`. Negotiation chooses
   * among them alone; a pipe that cannot have them fails with
   * ERR_TP_NEGOTIATION saying why, never falls back to another.
   */
  path?: PathPolicy | undefined;
}

/** How Context.listen() takes pipes. */
export interface ListenerOptions {
  /** The backends its pipes may use (as ConnectOptions.path): a peer that cannot meet them is dropped with ERR_TP_NEGOTIATION. */
  path?: PathPolicy | undefined;
  /**
   * Pipes that may wait for accept() at once (default 1024; Infinity for
   * no limit), give or take the handshakes under way when the limit is
   * reached. Past it the listener turns new peers away in their
   * handshake until the application accepts: their connect() fails with
   * ERR_TP_NEGOTIATION saying so, and 'connectionError' here says
   * ERR_TP_CONNECTION_REFUSED. A pipe that ends while it waits stays
   * until accepted, as a TCP connection closed before accept() does.
   */
  maxUnaccepted?: number | undefined;
}

/** Options of Context.warmUp(): a signal or a timeout stop it where it is. */
export interface WarmUpOptions extends OperationOptions {
  /**
   * Round trips over each transport and channel (default: 8,000 shared
   * among the pairs it runs, at least 2,000 each).
   */
  roundTrips?: number | undefined;
  /**
   * Only these pairs, each a registered transport and channel as the
   * report names them ("shm+cma"): a process that will only ever use one
   * pays for one (default: every pair).
   */
  pairs?: readonly string[] | undefined;
}

/** One open pipe's flight record, as Context.flightRecords() lists it. */
export interface PipeFlightRecord {
  /** The pipe. */
  pipe: Pipe;
  /** Its last events, oldest first. */
  events: FlightEvent[];
}

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
const DEFAULT_MAX_UNACCEPTED = 1024;
const DEFAULT_FLIGHT_RECORDER = 64;

const check = new OptionChecks("ContextOptions");
const listenerCheck = new OptionChecks("ListenerOptions");
const warmUpCheck = new OptionChecks("WarmUpOptions");
/** The longest a timer waits: a longer handshakeTimeout would fire at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/**
 * Holds the registered transports and channels, opens listeners and pipes,
 * and closes them all at the end.
 */
export class Context {
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
  /** What this context's handshakes draw on, both ways. */
  private readonly handshakeSettings: HandshakeSettings;
  /** The shared-secret handshake, when ContextOptions.auth is set. */
  private readonly auth?: SharedSecretAuth;
  private readonly transports = new Map<string, Registered<TransportContext>>();
  private readonly channels = new Map<string, Registered<ChannelContext>>();
  private readonly listeners = new Set<Listener>();
  private readonly pipes = new Set<Pipe>();
  /** Each connect under way: closing the context aborts them. */
  private readonly connecting = new Set<Deadline>();
  /** Handshakes dialled at once (DialGate); connects past them wait, their timeouts running. */
  private readonly dials = new DialGate(32);
  /** What ended pipes carried. */
  private readonly ended = new PipeCounters();
  private pipesOpened = 0;
  private closing = false;
  private closed?: Promise<void>;

  constructor(options: ContextOptions = {}) {
    check.object(options);
    if (options.name !== undefined && typeof options.name !== "string") check.fail("name", "a string", options.name);
    this.name = options.name ?? "";
    this.handshakeTimeout = check.wholeNumber("handshakeTimeout", options.handshakeTimeout, 1, MAX_TIMER_MS, "ms") ?? DEFAULT_HANDSHAKE_TIMEOUT;
    this.maxControlFrameLength = check.wholeNumber("maxControlFrameLength", options.maxControlFrameLength, 1) ?? DEFAULT_MAX_CONTROL_FRAME;
    this.descriptorLimits = {
      maxPayloads: check.wholeNumber("maxPayloads", options.maxPayloads, 1) ?? DEFAULT_DESCRIPTOR_LIMITS.maxPayloads,
      maxTensors: check.wholeNumber("maxTensors", options.maxTensors, 1) ?? DEFAULT_DESCRIPTOR_LIMITS.maxTensors,
      maxMessageBytes: check.wholeNumber("maxMessageBytes", options.maxMessageBytes, 1) ?? DEFAULT_DESCRIPTOR_LIMITS.maxMessageBytes,
    };
    this.maxPendingHandshakes = check.wholeNumber("maxPendingHandshakes", options.maxPendingHandshakes, 1) ?? DEFAULT_MAX_PENDING_HANDSHAKES;
    if (options.auth) this.auth = new SharedSecretAuth(options.auth);
    this.handshakeSettings = {
      name: this.name,
      transports: this.transports,
      channels: this.channels,
      auth: this.auth,
      handshakeTimeout: this.handshakeTimeout,
      pipeOptions: {
        maxDescriptorLength: this.maxControlFrameLength,
        limits: this.descriptorLimits,
        flightRecorder: check.wholeNumber("flightRecorder", options.flightRecorder, 0, 1_000_000, "events") ?? DEFAULT_FLIGHT_RECORDER,
      },
    };
  }

  /** Higher priority wins when both ends have several transports in common. */
  registerTransport(priority: number, name: string, context: TransportContext): void {
    this.checkRegistration(priority, name, this.transports);
    this.transports.set(name, { priority, name, context });
  }

  /** Higher priority wins for a device pair both ends can use with several channels. */
  registerChannel(priority: number, name: string, context: ChannelContext): void {
    this.checkRegistration(priority, name, this.channels);
    this.channels.set(name, { priority, name, context });
  }

  private checkRegistration(priority: number, name: string, into: Map<string, unknown>): void {
    if (this.closing) throw closedError("context");
    if (typeof priority !== "number" || !Number.isFinite(priority)) {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `the priority of "${name}" must be a finite number (higher wins), got ${describeValue(priority)}`);
    }
    if (typeof name !== "string" || !/^[A-Za-z0-9_.-]+$/.test(name)) {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `backend name ${JSON.stringify(name) ?? describeValue(name)} must be [A-Za-z0-9_.-]+`);
    }
    if (name.startsWith("tensorpipe-js.")) {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `backend name "${name}": tensorpipe-js.* names are the handshake's own entries`);
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
    const t = this.transports.get(scheme) ?? [...this.transports.values()].find((r) => r.context.aliases?.includes(scheme));
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
  async listen(urls: string | readonly string[], options?: ListenerOptions): Promise<Listener> {
    if (this.closing) throw closedError("context");
    checkOptionsObject(options);
    if (typeof urls !== "string" && !(Array.isArray(urls) && urls.length > 0)) {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        `listen() takes a URL or an array of URLs, one for each transport ("uv://127.0.0.1:0", "shm://name"), got ${Array.isArray(urls) ? "an empty array" : describeValue(urls)}`,
      );
    }
    const path = checkPathPolicy(options?.path, this.transports, this.channels);
    const targets = (typeof urls === "string" ? [urls] : urls).map((url) => {
      const { scheme, address } = parseUrl(url);
      return { transport: this.transportForScheme(scheme), scheme, address };
    });
    if (path)
      checkListenedTransports(
        path,
        this.transports,
        targets.map((t) => t.transport.name),
      );
    const settings = path ? { ...this.handshakeSettings, path } : this.handshakeSettings;
    const maxUnaccepted = listenerCheck.limit("maxUnaccepted", options?.maxUnaccepted) ?? DEFAULT_MAX_UNACCEPTED;
    const limits = { maxPendingHandshakes: this.maxPendingHandshakes, maxUnaccepted };
    const listener = await Listener.open(targets, settings, limits, (parts) => this.adopt(parts));
    this.listeners.add(listener);
    return listener;
  }

  /** Opens a pipe; resolves once the handshake with the listener is complete. */
  async connect(url: string, options?: ConnectOptions): Promise<Pipe> {
    if (this.closing) throw closedError("context");
    const { scheme, address } = parseUrl(url);
    const transport = this.transportForScheme(scheme);
    const path = checkPathPolicy(options?.path, this.transports, this.channels);
    const settings = path ? { ...this.handshakeSettings, path } : this.handshakeSettings;
    const what = `connect to ${url}`;
    checkOptionsObject(options);
    // Always a deadline: the handshake's own, unless the caller gave one.
    const deadline = operationDeadline({ signal: options?.signal, timeout: options?.timeout ?? this.handshakeTimeout }, what)!;
    const signal = deadline.signal;
    // Every connection of the pipe (a channel may want many) is opened
    // under this one signal, each with its own listener until it is open.
    setMaxListeners(0, signal);
    const opened: Connection[] = [];
    const abandon = (err: TensorPipeError) => {
      for (const c of opened) c.close(err);
    };
    const handshake = async (): Promise<Pipe> => {
      const leave = await this.dials.enter(signal);
      try {
        return this.adopt(await dial(settings, { url, transport, address, signal, opened }));
      } finally {
        leave();
      }
    };
    this.connecting.add(deadline);
    return deadline
      .race(handshake(), what, abandon)
      .catch((e) => {
        const err = fromNativeError(e, url);
        if (log.enabled) log("connect to %s failed: %s", url, describeError(err));
        abandon(err);
        throw err;
      })
      .finally(() => this.connecting.delete(deadline));
  }

  /**
   * Runs the hot path over pipes to this context itself, once for each
   * viable transport that names a loopback address and each channel that
   * carries CPU tensors, so that V8 has compiled it before the first real
   * message: call it once backends are registered, before serving. It
   * costs 2-3 s of CPU by default (8,000 round trips shared among the
   * pairs, at least 2,000 each), once per thread (a pair already warm in
   * this thread is not run again). While it runs it listens on a loopback
   * address, where it takes only its own pipes and closes any other. The
   * warm-up pipes count in stats() and show on the diagnostics channels as
   * any other pipe.
   */
  async warmUp(options?: WarmUpOptions): Promise<WarmUpReport> {
    if (this.closing) throw closedError("context");
    warmUpCheck.object(options);
    const roundTrips = warmUpCheck.wholeNumber("roundTrips", options?.roundTrips, 1, 1_000_000);
    if (this.transports.size === 0 || this.channels.size === 0) {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        `warmUp() has nothing to run: it needs a transport and a channel registered first (have ${this.transports.size} transport(s), ${this.channels.size} channel(s)); e.g. registerUvTransport(ctx) and registerBasicChannel(ctx)`,
      );
    }
    const pairs = this.warmUpPairs(options?.pairs);
    const deadline = operationDeadline(options, "warm-up") ?? new Deadline();
    const viable = (v: Viability) => (v.viable ? undefined : `not viable here: ${v.reason}`);
    const transports = byPriority(this.transports.values()).map((t) => ({
      name: t.name,
      skip: viable(t.context.isViable()),
      loopbackAddress: t.context.loopbackAddress,
    }));
    const channels = byPriority(this.channels.values()).map((c) => ({
      name: c.name,
      skip: viable(c.context.isViable()) ?? (c.context.deviceDescriptors().some((d) => d.device.type === "cpu") ? undefined : "carries no CPU tensors"),
    }));
    // Closing the context aborts it as it does a connect; strangers' pipes each wait on its signal.
    this.connecting.add(deadline);
    setMaxListeners(0, deadline.signal);
    try {
      return await warmUp(this, transports, channels, { roundTrips, maxMessageBytes: this.descriptorLimits.maxMessageBytes, pairs }, deadline.signal);
    } finally {
      this.connecting.delete(deadline);
      deadline.release();
    }
  }

  /** WarmUpOptions.pairs, each checked to name a registered transport and channel. */
  private warmUpPairs(pairs: unknown): Set<string> | undefined {
    if (pairs === undefined) return undefined;
    const registered: string[] = [];
    for (const t of this.transports.keys()) for (const c of this.channels.keys()) registered.push(pairName(t, c));
    if (!Array.isArray(pairs) || pairs.length === 0)
      return warmUpCheck.fail("pairs", `a non-empty array of pairs such as ${JSON.stringify(registered[0] ?? "uv+basic")}`, pairs);
    for (const pair of pairs) {
      if (typeof pair !== "string" || !registered.includes(pair)) {
        warmUpCheck.fail("pairs", `pairs of a registered transport and channel (${registered.join(", ")})`, pairs);
      }
    }
    return new Set(pairs as string[]);
  }

  /** Keeps the pipe of a finished handshake, or closes it if this context is closing. */
  private adopt(parts: PipeParts): Pipe {
    const pipe = new Pipe(parts);
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

  /** Whether `pipe` is one of this context's open pipes (for observers of diagnostics channels, which every context shares). */
  ownsPipe(pipe: Pipe): boolean {
    return this.pipes.has(pipe);
  }

  /** Every open pipe's flight record (ContextOptions.flightRecorder), with the pipe it is of; none when the recorder is off. */
  flightRecords(): PipeFlightRecord[] {
    if (this.handshakeSettings.pipeOptions.flightRecorder === 0) return [];
    return [...this.pipes].map((pipe) => ({ pipe, events: pipe.flightRecord() }));
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
        for (const d of this.connecting) d.abort(closedError("context"));
        for (const l of this.listeners) l.close();
        const pipes = [...this.pipes];
        for (const p of pipes) p.close();
        await Promise.all(pipes.map((p) => p.closed));
        await Promise.all([...[...this.transports.values()].map((t) => t.context.close()), ...[...this.channels.values()].map((c) => c.context.close())]);
      })();
    }
    return this.closed;
  }

  /** Whether close() was called. */
  get isClosed(): boolean {
    return this.closing;
  }

  /** Resolves once close() has finished: every pipe ended, every backend closed. */
  join(): Promise<void> {
    return this.closed ?? this.close();
  }

  /** close(), for `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}
