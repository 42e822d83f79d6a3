/**
 * Opt-in peer authentication with a shared secret: an extension of the
 * handshake that upstream TensorPipe does not have, off by default. With it
 * off, not one byte on the wire changes.
 *
 * Challenge and response, so that nothing captured can be replayed: every
 * proof covers a nonce the other side made fresh for this connection.
 *
 *   connect -> listen: Packet, Brochure with the entry  "hello:<c>"
 *   listen -> connect: BrochureAnswer for transport AUTH_ENTRY (the challenge),
 *                      whose channel descriptors hold { cpu:0 -> "<l>:<HMAC(server|c|l)>" }
 *   connect -> listen: Brochure with the entry  "proof:<HMAC(client|c|l)>"
 *   listen -> connect: the BrochureAnswer of the pipe
 *
 * where c and l are 16 random bytes (hex) drawn by each side, and the
 * entries sit in the Brochure's transport map under AUTH_ENTRY (a name no
 * transport has). The connecting side checks the listener's proof before
 * it gives its own. Each connection the answer registers then opens with
 * its RequestedConnection packet followed by one frame,
 * HMAC(connection|c|l|id), so that an id seen on the wire is no way in.
 *
 * Each side's name (ContextOptions.name) is bound to the same handshake:
 * the connecting side's proof brochure adds HMAC(name|dialler|c|l|<its
 * name>), the listener's answer HMAC(name|listener|c|l|<its name>), so
 * that a name a pipe reports under authentication is one a holder of the
 * secret gave in this very handshake.
 *
 * It authenticates the handshake, not the bytes that follow: the stream is
 * neither encrypted nor integrity-protected (see docs/security.md).
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { CPU_DEVICE, deviceKey } from "./device.js";
import { ErrorCode, TensorPipeError } from "./errors.js";
import { AUTH_ENTRY } from "./handshake/extensions.js";
import type { BrochureAnswer, DeviceDescriptors } from "./protocol/handshake.js";

/** Mutual authentication with a shared secret (ContextOptions.auth). */
export interface AuthOptions {
  /** Both ends must have the same secret, at least 16 bytes. */
  secret: string | Uint8Array;
}

/** The nonces of one authenticated handshake: the connecting side's and the listener's. */
export interface AuthSession {
  /** The connecting side's nonce. */
  readonly client: string;
  /** The listener's nonce. */
  readonly listener: string;
}

const NONCE = /^[0-9a-f]{32}$/;
const MAC = /^[0-9a-f]{64}$/;

function denied(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.PERMISSION_DENIED, message);
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

function nonce(): string {
  return randomBytes(16).toString("hex");
}

/** The two ends of the shared-secret handshake: HMAC-SHA256 proofs over both sides' fresh nonces. */
export class SharedSecretAuth {
  private readonly secret: Buffer;

  constructor(options: AuthOptions) {
    const secret = options?.secret;
    if (typeof secret !== "string" && !(secret instanceof Uint8Array)) {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, "auth.secret must be a string or a Uint8Array of at least 16 bytes");
    }
    this.secret = Buffer.from(secret);
    if (this.secret.length < 16) {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, "an authentication secret needs at least 16 bytes");
    }
  }

  private mac(...parts: string[]): string {
    return createHmac("sha256", this.secret).update(parts.join("|")).digest("hex");
  }

  /** Connecting side, first: the Brochure entry, and the nonce it carries. */
  hello(): {
    /** Goes in the Brochure under AUTH_ENTRY. */
    entry: string;
    /** This side's nonce, kept for answerChallenge(). */
    client: string;
  } {
    const client = nonce();
    return { entry: `hello:${client}`, client };
  }

  /** Listening side: checks the hello and makes the challenge answer, with this side's proof. */
  challenge(entry: string | undefined): {
    /** The challenge, written as a BrochureAnswer. */
    answer: BrochureAnswer;
    /** Both nonces, for verifyProof() and the connections' proofs. */
    session: AuthSession;
  } {
    if (entry === undefined) throw denied("peer did not authenticate (this listener requires a shared secret)");
    const client = entry.startsWith("hello:") ? entry.slice(6) : "";
    if (!NONCE.test(client)) throw denied("malformed authentication hello");
    const listener = nonce();
    const proof: DeviceDescriptors = new Map([
      [deviceKey(CPU_DEVICE), { device: CPU_DEVICE, descriptor: `${listener}:${this.mac("server", client, listener)}` }],
    ]);
    return {
      answer: {
        transport: AUTH_ENTRY,
        address: "",
        transportRegistrationIds: new Map(),
        transportDomainDescriptor: "",
        channelRegistrationIds: new Map(),
        channelDeviceDescriptors: new Map([[AUTH_ENTRY, proof]]),
        channelForDevicePair: [],
      },
      session: { client, listener },
    };
  }

  /** Connecting side: checks the listener's challenge and proof; returns the session and this side's proof entry. */
  answerChallenge(
    client: string,
    answer: BrochureAnswer,
  ): {
    /** Both nonces, for the connections' proofs. */
    session: AuthSession;
    /** This side's proof: goes in the second Brochure under AUTH_ENTRY. */
    entry: string;
  } {
    const got = answer.transport === AUTH_ENTRY ? answer.channelDeviceDescriptors.get(AUTH_ENTRY)?.get(deviceKey(CPU_DEVICE)) : undefined;
    if (got === undefined) throw denied("listener did not authenticate (it has no shared secret, or not this extension)");
    const [listener = "", mac = "", extra] = got.descriptor.split(":");
    if (!NONCE.test(listener) || !MAC.test(mac) || extra !== undefined) throw denied("malformed authentication challenge");
    if (!sameText(mac, this.mac("server", client, listener))) throw denied("listener's shared secret does not match");
    return { session: { client, listener }, entry: `proof:${this.mac("client", client, listener)}` };
  }

  /** Listening side: checks the connecting side's proof for `session`. */
  verifyProof(session: AuthSession, entry: string | undefined): void {
    const mac = entry?.startsWith("proof:") ? entry.slice(6) : undefined;
    if (mac === undefined || !MAC.test(mac)) throw denied("peer did not answer the authentication challenge");
    if (!sameText(mac, this.mac("client", session.client, session.listener))) throw denied("peer's shared secret does not match");
  }

  /** The proof that `name` is the name `side` gave in the handshake of `session`. */
  nameProof(session: AuthSession, side: "dialler" | "listener", name: string): string {
    return this.mac("name", side, session.client, session.listener, name);
  }

  /**
   * The name `side` gave, if `proof` proves it for `session`; undefined
   * without a proof (a peer of an earlier version). A proof that does not
   * match is an attack on the handshake, and refused.
   */
  provenName(session: AuthSession, side: "dialler" | "listener", name: string | undefined, proof: string | undefined): string | undefined {
    if (proof === undefined || name === undefined) return undefined;
    if (!MAC.test(proof) || !sameText(proof, this.nameProof(session, side, name))) throw denied(`the ${side}'s name does not match its proof`);
    return name;
  }

  /** The frame after a RequestedConnection packet that ties it to its pipe's handshake. */
  connectionProof(session: AuthSession, id: bigint): Uint8Array {
    return Buffer.from(this.mac("connection", session.client, session.listener, id.toString()), "hex");
  }

  /** Listening side: checks the frame that followed a RequestedConnection packet. */
  verifyConnectionProof(session: AuthSession, id: bigint, frame: Uint8Array): void {
    const want = Buffer.from(this.mac("connection", session.client, session.listener, id.toString()), "hex");
    if (frame.byteLength !== want.length || !timingSafeEqual(frame, want)) {
      throw denied(`connection for registration ${id} did not prove it belongs to its pipe`);
    }
  }
}
