import { EventEmitter } from "node:events";
import { type Deadline, type OperationOptions, operationDeadline } from "./abort.js";
import { debugLog, describeError } from "./debug.js";
import { Deferred } from "./deferred.js";
import { channels as diagnostics } from "./diagnostic-channels.js";
import { ErrorCode, TensorPipeError, closedError, fromNativeError } from "./errors.js";
import { answer } from "./handshake/answer.js";
import type { HandshakeSettings } from "./handshake/settings.js";
import { HandshakeWaits, type Stalled } from "./handshake-waits.js";
import type { Registered } from "./negotiation.js";
import type { PipeParts } from "./pipe/parts.js";
import type { Pipe } from "./pipe/pipe.js";
import { decodePacket } from "./protocol/handshake.js";
import { describeValue } from "./describe-value.js";
import { Registrations } from "./registrations.js";
import { addCount } from "./stats.js";
import type { Connection, TransportContext, TransportListener } from "./transport.js";

const log = debugLog("listener");

/** A listener dropped a connection before it became a pipe. */
export interface ListenerErrorMessage {
  /** The listener. */
  listener: Listener;
  /** Why it was dropped. */
  error: TensorPipeError;
  /** Where the connection came from ("" when accepting itself failed). */
  remoteAddress: string;
}

/** A first packet is a few bytes plus a context name. */
const MAX_PACKET_FRAME = 64 * 1024;

/** Where a listener listens: one transport at one address. */
export interface ListenTarget {
  /** The transport, as registered. */
  transport: Registered<TransportContext>;
  /** The URL's scheme, for the address the listener reports. */
  scheme: string;
  /** The part of the URL after "scheme://". */
  address: string;
}

/** What a listener holds at once: connections in their handshakes, and pipes waiting for accept(). */
export interface ListenerLimits {
  /** ContextOptions.maxPendingHandshakes. */
  maxPendingHandshakes: number;
  /** ListenerOptions.maxUnaccepted. */
  maxUnaccepted: number;
}

/** The events a Listener emits. */
export interface ListenerEvents {
  /** A connection was dropped before it became a pipe (bad bytes, timeout, accept failed, ...). */
  connectionError: [error: TensorPipeError, remoteAddress: string];
  /** close() was called, by the caller or by the context's close(). */
  close: [];
}

/**
 * Accepts pipes on one or more transports. Connections that turn out not to
 * be TensorPipe peers are dropped with a 'connectionError' event; the
 * listener carries on. Made by Context.listen().
 */
export class Listener extends EventEmitter<ListenerEvents> implements AsyncIterable<Pipe> {
  private readonly transportListeners = new Map<string, TransportListener>();
  private readonly urls = new Map<string, string>();
  /** The scheme each transport was listened on by, where it was another name ("tcp" for uv). */
  private readonly schemes = new Map<string, string>();
  private readonly ready: Pipe[] = [];
  private readonly acceptWaiters: Deferred<Pipe>[] = [];
  private readonly registrations: Registrations;
  private closedError?: TensorPipeError;
  /** The connections in their handshakes, each waiting on its peer: dropped when stalled under pressure, closed with the listener. */
  private readonly waits = new HandshakeWaits();
  /** Drops the stalled connections once they are past their grace, out of descriptors (sweepStalledSoon). */
  private sweep?: NodeJS.Timeout;
  private readonly counts = new Map<string, number>();

  private constructor(
    private readonly settings: HandshakeSettings,
    private readonly limits: ListenerLimits,
    /** Makes the Pipe of a finished handshake (the Context keeps it). */
    private readonly adopt: (parts: PipeParts) => Pipe,
  ) {
    super();
    this.registrations = new Registrations(settings.auth);
  }

  /**
   * @internal Context.listen()'s: listens at every target, one transport
   * each; the handshakes draw on `settings`, and `adopt` makes each
   * finished one a Pipe.
   */
  static async open(
    targets: readonly ListenTarget[],
    settings: HandshakeSettings,
    limits: ListenerLimits,
    adopt: (parts: PipeParts) => Pipe,
  ): Promise<Listener> {
    const listener = new Listener(settings, limits, adopt);
    const { maxPendingHandshakes } = limits;
    try {
      for (const { transport, scheme, address } of targets) {
        if (listener.transportListeners.has(transport.name)) {
          throw new TensorPipeError(ErrorCode.INVALID_ARG, `listener has two addresses for transport "${transport.name}"`);
        }
        const tl = await transport.context.listen(
          address,
          (c) => listener.handleConnection(transport.name, c),
          (e) => listener.reportAcceptError(e),
          { handshakeTimeout: settings.handshakeTimeout, maxPendingHandshakes },
        );
        listener.transportListeners.set(transport.name, tl);
        listener.urls.set(transport.name, `${scheme}://${tl.address()}`);
        listener.schemes.set(scheme, transport.name);
      }
    } catch (e) {
      listener.close();
      throw e;
    }
    return listener;
  }

  /** Connections dropped before they became pipes, by error code. */
  get connectionErrors(): ReadonlyMap<string, number> {
    return this.counts;
  }

  /** The URLs peers can connect to, one per transport listened on. */
  addresses(): string[] {
    return [...this.urls.values()];
  }

  /**
   * The URL peers connect to over `transport` ("uv://127.0.0.1:41234"),
   * or over the first transport listened on; ERR_TP_INVALID_ARG where it
   * does not listen on that transport.
   */
  url(transport?: string): string {
    if (transport !== undefined && typeof transport !== "string") {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, `url() takes a transport's name ("uv", "shm") or nothing, got ${describeValue(transport)}`);
    }
    const name = transport?.toLowerCase();
    const url = name === undefined ? this.urls.values().next().value : (this.urls.get(name) ?? this.urls.get(this.schemes.get(name) ?? ""));
    if (url === undefined) {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        `this listener does not listen on ${transport === undefined ? "any transport" : `transport "${transport}"`} (it listens on ${[...this.urls.keys()].join(", ") || "none"})`,
      );
    }
    return url;
  }

  /** The bound address of `transport` ("127.0.0.1:41234"), as sent in brochure answers. */
  transportAddress(transport: string): string | undefined {
    return this.transportListeners.get(transport)?.address();
  }

  /** The transports this listener accepts on. */
  listeningTransports(): ReadonlySet<string> {
    return new Set(this.transportListeners.keys());
  }

  /** Each connection a transport accepted: a new pipe's, or one a handshake asked for. */
  private handleConnection(transport: string, connection: Connection): void {
    if (this.closedError) {
      connection.close(this.closedError);
      return;
    }
    this.dropStalledPastCap();
    this.waits.accepted(connection);
    const timer = setTimeout(() => {
      connection.close(
        new TensorPipeError(ErrorCode.TIMEOUT, `handshake not done within ${this.settings.handshakeTimeout} ms`, {
          where: connection.remoteAddress,
        }),
      );
    }, this.settings.handshakeTimeout);
    this.routeConnection(transport, connection).then(
      () => {
        clearTimeout(timer);
        this.waits.done(connection);
      },
      (e) => {
        clearTimeout(timer);
        this.waits.done(connection);
        const err = fromNativeError(e, connection.remoteAddress);
        connection.close(err);
        if (!this.closedError) this.dropped(err, connection.remoteAddress);
      },
    );
  }

  /**
   * Peers that connect and say nothing, or a few bytes and then nothing,
   * must not keep real ones out: past maxPendingHandshakes connections in
   * their handshakes, the oldest that has waited on its peer past its
   * grace goes (a burst of real peers goes over the cap for that long).
   */
  private dropStalledPastCap(): void {
    const max = this.limits.maxPendingHandshakes;
    if (this.waits.size < max) return;
    const stalled = this.waits.takeOldestStalled();
    if (stalled) this.drop(stalled, `while ${max} others waited (ContextOptions.maxPendingHandshakes)`);
  }

  private drop({ connection, spoke, waited }: Stalled, why: string): void {
    const what = spoke ? `its handshake stalled for ${Math.round(waited)} ms` : `it sent no whole first packet in ${Math.round(waited)} ms`;
    connection.close(new TensorPipeError(ErrorCode.TIMEOUT, `connection dropped: ${what} ${why}`, { where: connection.remoteAddress }));
  }

  /** A transport failed to accept a connection (out of descriptors, ...): it goes on listening. */
  private reportAcceptError(error: Error): void {
    if (this.closedError) return;
    const err = fromNativeError(error, "accept");
    this.dropped(err, "");
    if (err.errnoName === "EMFILE" || err.errnoName === "ENFILE") this.sweepStalledSoon();
  }

  /**
   * Out of descriptors, new connections are turned away before they get
   * here, so none comes to push a stalled one out: each whose handshake
   * has waited on its peer past its grace goes by itself, and frees its
   * descriptor, until none is left.
   */
  private sweepStalledSoon(): void {
    if (this.sweep) return;
    const wait = this.waits.nextCheckIn();
    if (wait === undefined) return;
    this.sweep = setTimeout(() => {
      this.sweep = undefined;
      for (let s = this.waits.takeOldestStalled(); s; s = this.waits.takeOldestStalled()) this.drop(s, "while this process was out of file descriptors");
      this.sweepStalledSoon();
    }, wait);
    this.sweep.unref();
  }

  /** Counts, logs, publishes and emits a connection that will not become a pipe. */
  private dropped(error: TensorPipeError, remoteAddress: string): void {
    addCount(this.counts, error.code);
    if (log.enabled) log("dropped a connection from %s: %s", remoteAddress || "accept", describeError(error));
    if (diagnostics.listenerError.hasSubscribers) diagnostics.listenerError.publish({ listener: this, error, remoteAddress });
    this.emit("connectionError", error, remoteAddress);
  }

  /**
   * Reads the first packet: a connection an existing handshake asked for,
   * or a new pipe, answered and delivered while fewer than maxUnaccepted
   * wait for accept().
   */
  private async routeConnection(transport: string, connection: Connection): Promise<void> {
    const first = await connection.read(MAX_PACKET_FRAME);
    this.waits.spoke(connection);
    const packet = decodePacket(first);
    if (packet.kind === "requested") {
      await this.registrations.claim(packet.registrationId, connection);
      return;
    }
    // Pipes delivered and not taken: counting handshakes under way too
    // would turn peers away from a listener that accepts as fast as they
    // come, and let peers that stall after the answer lock it.
    const max = this.limits.maxUnaccepted;
    if (this.ready.length >= max) {
      throw new TensorPipeError(
        ErrorCode.CONNECTION_REFUSED,
        `turned a new pipe away: ${max} pipes wait for accept() (ListenerOptions.maxUnaccepted); accept them, or raise the limit`,
        { where: connection.remoteAddress },
      );
    }
    const parts = await answer(this.settings, connection, transport, packet.contextName, {
      transports: this.listeningTransports(),
      addressOf: (name) => this.transportAddress(name),
      registrations: this.registrations,
      answered: (c) => this.waits.answeredOn(c),
    });
    this.deliver(this.adopt(parts));
  }

  private deliver(pipe: Pipe): void {
    const waiter = this.acceptWaiters.shift();
    if (waiter) {
      waiter.resolve(pipe);
      return;
    }
    // One that ends while it waits is kept too, as TCP keeps a connection
    // closed before accept(): accept() gives it, and its reads say how it
    // ended (a health check that connects and closes is seen).
    this.ready.push(pipe);
  }

  /** Resolves with the next pipe whose handshake completed. */
  accept(options?: OperationOptions): Promise<Pipe> {
    let deadline: Deadline | undefined;
    try {
      deadline = operationDeadline(options, "accept");
    } catch (e) {
      return Promise.reject(e);
    }
    const ready = this.ready.shift() ?? this.closedError;
    if (ready) {
      deadline?.release();
      return ready instanceof TensorPipeError ? Promise.reject(ready) : Promise.resolve(ready);
    }
    const waiter = new Deferred<Pipe>();
    this.acceptWaiters.push(waiter);
    if (!deadline) return waiter.promise;
    return deadline.race(waiter.promise, "accept", () => {
      const i = this.acceptWaiters.indexOf(waiter);
      if (i >= 0) this.acceptWaiters.splice(i, 1);
    });
  }

  /** Yields accepted pipes until the listener is closed. */
  async *[Symbol.asyncIterator](): AsyncIterator<Pipe> {
    for (;;) {
      try {
        yield await this.accept();
      } catch (e) {
        if (e === this.closedError) return;
        throw e;
      }
    }
  }

  /** Whether close() was called. */
  get isClosed(): boolean {
    return this.closedError !== undefined;
  }

  /** Stops listening; pending accepts reject with ERR_TP_CLOSED. Accepted pipes stay open. */
  close(): void {
    if (this.closedError) return;
    const err = closedError("listener");
    this.closedError = err;
    for (const l of this.transportListeners.values()) l.close();
    for (const w of this.acceptWaiters.splice(0)) w.reject(err);
    this.registrations.rejectAll(err);
    for (const c of [...this.waits.connections()]) c.close(err);
    this.waits.clear();
    clearTimeout(this.sweep);
    for (const p of this.ready.splice(0)) p.close();
    this.emit("close");
  }

  /** close(), for `await using`. */
  async [Symbol.asyncDispose](): Promise<void> {
    this.close();
  }
}
