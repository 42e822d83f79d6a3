import { randomBytes } from "node:crypto";
import type { AuthSession, SharedSecretAuth } from "./auth.js";
import { EventEmitter } from "node:events";
import { type OperationOptions, operationSignal, raceSignal } from "./abort.js";
import { debugLog, describeError } from "./debug.js";
import { Deferred } from "./deferred.js";
import { channels as diagnostics } from "./diagnostic-channels.js";
import { ErrorCode, TensorPipeError, closedError, fromNativeError, protocolError } from "./errors.js";
import type { Pipe } from "./pipe.js";
import { addCount } from "./stats.js";
import { decodePacket } from "./protocol.js";
import type { Connection, TransportListener } from "./transport.js";

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
/** How long a connection may say nothing before the cap on silent ones may drop it (ms). */
const SILENT_GRACE_MS = 250;
/** The frame that ties a requested connection to its pipe, under authentication: one HMAC-SHA256. */
const CONNECTION_PROOF_FRAME = 32;

/** What the listener needs from its context to turn a connection into a pipe. */
export interface PipeAcceptor {
  /** Completes the handshake of a new pipe that came on `transport`. */
  acceptPipe(listener: Listener, transport: string, connection: Connection): Promise<Pipe>;
  /** Checks the proofs of connections registered by authenticated handshakes. */
  readonly auth?: SharedSecretAuth;
  /** How long a connection may take to become a pipe, in ms. */
  readonly handshakeTimeout: number;
  /** How many connections may be in their handshake at once; one more drops the oldest. */
  readonly maxPendingHandshakes: number;
}

/** The events a Listener emits. */
export interface ListenerEvents {
  /** A connection was dropped before it became a pipe (bad bytes, timeout, accept failed, ...). */
  connectionError: [error: TensorPipeError, remoteAddress: string];
}

/**
 * Accepts pipes on one or more transports. Connections that turn out not to
 * be TensorPipe peers are dropped with a 'connectionError' event; the
 * listener carries on.
 */
export class Listener extends EventEmitter<ListenerEvents> implements AsyncIterable<Pipe> {
  private readonly transportListeners = new Map<string, TransportListener>();
  private readonly urls = new Map<string, string>();
  private readonly ready: Pipe[] = [];
  private readonly acceptWaiters: Deferred<Pipe>[] = [];
  private readonly registrations = new Map<bigint, { waiter: Deferred<Connection>; session?: AuthSession }>();
  private closedError?: TensorPipeError;
  private readonly pending = new Set<Connection>();
  /** Connections that have not sent their first frame yet, oldest first, with when they came. */
  private readonly silent = new Map<Connection, number>();
  /** Drops the silent connections once they are past their grace, out of descriptors (sweepSilentSoon). */
  private sweep?: NodeJS.Timeout;
  /** @internal Connections dropped before they became pipes, by error code. */
  readonly connectionErrors = new Map<string, number>();

  constructor(private readonly acceptor: PipeAcceptor) {
    super();
  }

  /** @internal */
  addTransportListener(transport: string, scheme: string, listener: TransportListener): void {
    this.transportListeners.set(transport, listener);
    this.urls.set(transport, `${scheme}://${listener.address()}`);
  }

  /** The URLs peers can connect to, one per transport listened on. */
  addresses(): string[] {
    return [...this.urls.values()];
  }

  /** The bound address of `transport` ("127.0.0.1:41234"), as sent in brochure answers. */
  transportAddress(transport: string): string | undefined {
    return this.transportListeners.get(transport)?.address();
  }

  /** The transports this listener accepts on. */
  listeningTransports(): ReadonlySet<string> {
    return new Set(this.transportListeners.keys());
  }

  /** @internal Called by a transport for each accepted connection. */
  handleConnection(transport: string, connection: Connection): void {
    if (this.closedError) {
      connection.close(this.closedError);
      return;
    }
    this.dropSilentPastCap();
    this.silent.set(connection, performance.now());
    this.pending.add(connection);
    const timer = setTimeout(() => {
      connection.close(
        new TensorPipeError(ErrorCode.TIMEOUT, `handshake not done within ${this.acceptor.handshakeTimeout} ms`, {
          where: connection.remoteAddress,
        }),
      );
    }, this.acceptor.handshakeTimeout);
    this.routeConnection(transport, connection).then(
      (pipe) => {
        clearTimeout(timer);
        this.pending.delete(connection);
        if (pipe) this.deliver(pipe);
      },
      (e) => {
        clearTimeout(timer);
        this.pending.delete(connection);
        const err = fromNativeError(e, connection.remoteAddress);
        connection.close(err);
        if (!this.closedError) this.dropped(err, connection.remoteAddress);
      },
    );
  }

  /**
   * Peers that connect and say nothing must not keep real ones out: past
   * maxPendingHandshakes connections that have not sent their first frame,
   * the oldest goes, once it has been silent longer than a real peer takes
   * to send one (a burst of real peers goes over the cap for that long).
   */
  private dropSilentPastCap(): void {
    if (this.silent.size < this.acceptor.maxPendingHandshakes) return;
    const [oldest, since] = this.silent.entries().next().value!;
    if (performance.now() - since < SILENT_GRACE_MS) return;
    this.silent.delete(oldest);
    oldest.close(
      new TensorPipeError(
        ErrorCode.TIMEOUT,
        `connection dropped: it sent nothing while ${this.acceptor.maxPendingHandshakes} others waited (ContextOptions.maxPendingHandshakes)`,
        { where: oldest.remoteAddress },
      ),
    );
  }

  /** @internal Called by a transport that failed to accept a connection. */
  reportAcceptError(error: Error): void {
    if (this.closedError) return;
    const err = fromNativeError(error, "accept");
    this.dropped(err, "");
    if (err.errno === "EMFILE" || err.errno === "ENFILE") this.sweepSilentSoon();
  }

  /**
   * Out of descriptors, new connections are turned away before they get
   * here, so none comes to push a silent one out: those silent past the
   * grace period go by themselves, and free their descriptors.
   */
  private sweepSilentSoon(): void {
    if (this.sweep || this.silent.size === 0) return;
    const since = this.silent.values().next().value!;
    this.sweep = setTimeout(
      () => {
        this.sweep = undefined;
        const now = performance.now();
        for (const [c, t] of this.silent) {
          if (now - t < SILENT_GRACE_MS) break;
          this.silent.delete(c);
          c.close(
            new TensorPipeError(ErrorCode.TIMEOUT, "connection dropped: it sent nothing while this process was out of file descriptors", {
              where: c.remoteAddress,
            }),
          );
        }
      },
      Math.max(0, since + SILENT_GRACE_MS - performance.now()),
    );
    this.sweep.unref();
  }

  /** Counts, logs, publishes and emits a connection that will not become a pipe. */
  private dropped(error: TensorPipeError, remoteAddress: string): void {
    addCount(this.connectionErrors, error.code);
    if (log.enabled) log("dropped a connection from %s: %s", remoteAddress || "accept", describeError(error));
    if (diagnostics.listenerError.hasSubscribers) diagnostics.listenerError.publish({ listener: this, error, remoteAddress });
    this.emit("connectionError", error, remoteAddress);
  }

  /** Reads the first packet: a new pipe, or a connection an existing handshake asked for. */
  private async routeConnection(transport: string, connection: Connection): Promise<Pipe | undefined> {
    let first: Uint8Array;
    try {
      first = await connection.read(MAX_PACKET_FRAME);
    } finally {
      this.silent.delete(connection);
    }
    const packet = decodePacket(first);
    if (packet.kind === "spontaneous") {
      return this.acceptor.acceptPipe(this, transport, connection);
    }
    const id = packet.registrationId;
    const registration = this.registrations.get(id);
    if (!registration) throw protocolError(`unknown registration id ${id}`, connection.remoteAddress);
    // A connection that fails the proof is dropped and the id stays for the real one.
    if (registration.session) {
      this.acceptor.auth!.verifyConnectionProof(registration.session, id, await connection.read(CONNECTION_PROOF_FRAME));
      if (this.registrations.get(id) !== registration) throw protocolError(`registration id ${id} was already taken`, connection.remoteAddress);
    }
    this.registrations.delete(id);
    registration.waiter.resolve(connection);
    return undefined;
  }

  /**
   * @internal Reserves an id whose connection the peer will open: 64
   * random bits, so that no other process can guess one and slip in; with
   * `session`, the connection must also prove that it belongs to it.
   */
  register(session?: AuthSession): { id: bigint; connection: Promise<Connection>; cancel: () => void } {
    let id: bigint;
    do id = randomBytes(8).readBigUInt64LE();
    while (this.registrations.has(id));
    const waiter = new Deferred<Connection>();
    const registration = { waiter, session };
    this.registrations.set(id, registration);
    return {
      id,
      connection: waiter.promise,
      cancel: () => {
        if (this.registrations.get(id) === registration) this.registrations.delete(id);
        waiter.reject(closedError("registration"));
      },
    };
  }

  private deliver(pipe: Pipe): void {
    const waiter = this.acceptWaiters.shift();
    if (waiter) waiter.resolve(pipe);
    else this.ready.push(pipe);
  }

  /** Resolves with the next pipe whose handshake completed. */
  accept(options?: OperationOptions): Promise<Pipe> {
    const ready = this.ready.shift();
    if (ready) return Promise.resolve(ready);
    if (this.closedError) return Promise.reject(this.closedError);
    const waiter = new Deferred<Pipe>();
    this.acceptWaiters.push(waiter);
    return raceSignal(waiter.promise, operationSignal(options), "accept", () => {
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
    for (const r of this.registrations.values()) r.waiter.reject(err);
    this.registrations.clear();
    for (const c of this.pending) c.close(err);
    this.pending.clear();
    this.silent.clear();
    clearTimeout(this.sweep);
    for (const p of this.ready.splice(0)) p.close();
  }
}
