/**
 * The connections a listener's handshakes asked peers to open, by
 * registration id: 64 random bits each, so that no other process can
 * guess one and slip in, and under authentication a proof that the
 * connection belongs to its handshake.
 */
import { randomBytes } from "node:crypto";
import type { AuthSession, SharedSecretAuth } from "./auth.js";
import { Deferred } from "./deferred.js";
import { ErrorCode, TensorPipeError, closedError, protocolError } from "./errors.js";
import type { Connection } from "./transport.js";

/** The frame that ties a requested connection to its pipe, under authentication: one HMAC-SHA256. */
const CONNECTION_PROOF_FRAME = 32;

/**
 * How many given-up ids are remembered, so that a connection that comes
 * after its handshake failed is told apart from a forged one. Only this
 * process's own handshakes add to it.
 */
const REMEMBERED_ENDED = 1024;

/** One id reserved by a handshake: its connection arrives, or it is cancelled. */
export interface Registration {
  /** The id sent to the peer in the BrochureAnswer. */
  readonly id: bigint;
  /** Resolves with the connection that came with this id. */
  readonly connection: Promise<Connection>;
  /** Gives the id up, because of `reason`: its connection, if it comes, is refused. */
  cancel(reason: Error): void;
}

interface Waiting {
  waiter: Deferred<Connection>;
  session?: AuthSession;
}

/** The ids a listener's handshakes reserved and the connections that answer them. */
export class Registrations {
  private readonly waiting = new Map<bigint, Waiting>();
  /** Ids given up, oldest first, with why their handshake ended. */
  private readonly ended = new Map<bigint, Error>();

  constructor(private readonly auth?: SharedSecretAuth) {}

  /** Reserves an id; with `session`, its connection must also prove that it belongs to that handshake. */
  register(session?: AuthSession): Registration {
    let id: bigint;
    do id = randomBytes(8).readBigUInt64LE();
    while (this.waiting.has(id));
    const entry: Waiting = { waiter: new Deferred<Connection>(), session };
    this.waiting.set(id, entry);
    return {
      id,
      connection: entry.waiter.promise,
      cancel: (reason) => {
        if (this.waiting.get(id) === entry) {
          this.waiting.delete(id);
          this.remember(id, reason);
        }
        entry.waiter.reject(closedError("registration"));
      },
    };
  }

  /**
   * Hands `connection`, which came with a RequestedConnection packet for
   * `id`, to the handshake that reserved it. A connection that fails the
   * proof is refused and the id stays for the real one.
   */
  async claim(id: bigint, connection: Connection): Promise<void> {
    const entry = this.waiting.get(id);
    if (!entry) {
      const reason = this.ended.get(id);
      if (!reason) throw protocolError(`unknown registration id ${id}`, connection.remoteAddress);
      throw new TensorPipeError(ErrorCode.CLOSED, `connection for registration id ${id} came after its handshake had failed: ${reason.message}`, {
        where: connection.remoteAddress,
        cause: reason,
      });
    }
    if (entry.session) {
      this.auth!.verifyConnectionProof(entry.session, id, await connection.read(CONNECTION_PROOF_FRAME));
      if (this.waiting.get(id) !== entry) throw protocolError(`registration id ${id} was already taken`, connection.remoteAddress);
    }
    this.waiting.delete(id);
    entry.waiter.resolve(connection);
  }

  private remember(id: bigint, reason: Error): void {
    if (this.ended.size >= REMEMBERED_ENDED) this.ended.delete(this.ended.keys().next().value!);
    this.ended.set(id, reason);
  }

  /** Every reservation fails with `error` (the listener closed). */
  rejectAll(error: Error): void {
    for (const entry of this.waiting.values()) entry.waiter.reject(error);
    this.waiting.clear();
  }
}
