/**
 * Opt-in peer authentication with a shared secret: an extension of the
 * handshake that upstream TensorPipe does not have, off by default. With it
 * off, not one byte on the wire changes.
 *
 * The connecting side adds one entry to its Brochure's transport map (a
 * name no transport has, so a peer without the extension ignores it):
 *   "tensorpipe-js.auth.hmac-sha256" -> "<nonce>:<time ms>:<HMAC(secret, 'client|nonce|time')>"
 * The listener drops the connection unless the MAC checks out, the time is
 * within `maxSkewMs` and the nonce is new. It proves itself in its
 * BrochureAnswer under the same name in the channel descriptor map:
 *   { cpu:0 -> HMAC(secret, 'server|nonce') }
 * and the connecting side refuses the pipe without it. With authentication
 * on, registration ids are random, so a third party cannot slip into a
 * pipe by guessing them.
 */
import { createHmac, randomBytes, timingSafeEqual } from "node:crypto";
import { CPU_DEVICE, deviceKey } from "./device.js";
import { ErrorCode, TensorPipeError } from "./errors.js";
import type { DeviceDescriptors } from "./protocol.js";

/** The brochure entry (a transport name no transport has) that carries the handshake's proofs. */
export const AUTH_ENTRY = "tensorpipe-js.auth.hmac-sha256";

/** Mutual authentication with a shared secret (ContextOptions.auth). */
export interface AuthOptions {
  /** Both ends must have the same secret. */
  secret: string | Uint8Array;
  /** How far apart the two clocks may be (ms, default 60 s). */
  maxSkewMs?: number;
}

function denied(message: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.PERMISSION_DENIED, message);
}

function sameText(a: string, b: string): boolean {
  const x = Buffer.from(a);
  const y = Buffer.from(b);
  return x.length === y.length && timingSafeEqual(x, y);
}

/** The two ends of the shared-secret handshake: HMAC-SHA256 proofs over fresh nonces and the time. */
export class SharedSecretAuth {
  private readonly secret: Buffer;
  private readonly maxSkewMs: number;
  /** Nonces seen within the time window, to refuse replays. */
  private readonly seen = new Map<string, number>();

  constructor(options: AuthOptions) {
    this.secret = Buffer.from(options.secret);
    if (this.secret.length < 16) {
      throw new TensorPipeError(ErrorCode.INVALID_ARG, "an authentication secret needs at least 16 bytes");
    }
    this.maxSkewMs = options.maxSkewMs ?? 60_000;
  }

  private mac(text: string): string {
    return createHmac("sha256", this.secret).update(text).digest("hex");
  }

  /** The connecting side's Brochure entry, and the nonce to check the answer against. */
  clientHello(): {
    /** Goes in the brochure under AUTH_ENTRY. */
    entry: string;
    /** Kept to check the listener's proof with. */
    nonce: string;
  } {
    const nonce = randomBytes(16).toString("hex");
    const time = Date.now();
    return { entry: `${nonce}:${time}:${this.mac(`client|${nonce}|${time}`)}`, nonce };
  }

  /** The listening side checks the entry and returns the nonce. */
  verifyClient(entry: string | undefined): string {
    if (entry === undefined) throw denied("peer did not authenticate (this listener requires a shared secret)");
    const [nonce, time, mac, extra] = entry.split(":");
    if (!nonce || !time || !mac || extra !== undefined || !/^[0-9a-f]{32}$/.test(nonce)) {
      throw denied("malformed authentication entry");
    }
    if (!sameText(mac, this.mac(`client|${nonce}|${time}`))) throw denied("peer's shared secret does not match");
    const now = Date.now();
    if (!(Math.abs(now - Number(time)) <= this.maxSkewMs)) throw denied("peer's authentication is stale or from the future");
    for (const [n, t] of this.seen) if (now - t > 2 * this.maxSkewMs) this.seen.delete(n);
    if (this.seen.has(nonce)) throw denied("peer replayed an authentication");
    this.seen.set(nonce, now);
    return nonce;
  }

  /** The listening side's proof, for its BrochureAnswer. */
  serverProof(nonce: string): DeviceDescriptors {
    return new Map([[deviceKey(CPU_DEVICE), { device: CPU_DEVICE, descriptor: this.mac(`server|${nonce}`) }]]);
  }

  /** The connecting side checks the listener's proof. */
  verifyServer(nonce: string, proof: DeviceDescriptors | undefined): void {
    const got = proof?.get(deviceKey(CPU_DEVICE))?.descriptor;
    if (got === undefined) throw denied("listener did not authenticate (it has no shared secret, or not this extension)");
    if (!sameText(got, this.mac(`server|${nonce}`))) throw denied("listener's shared secret does not match");
  }
}
