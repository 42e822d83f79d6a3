/**
 * Where the connecting side may open the connections a listener's answer
 * asks for. The address is the listener's word: it may name only itself.
 */
import { networkInterfaces } from "node:os";
import { splitHostPort } from "../address.js";
import { protocolError } from "../errors.js";
import type { Registered } from "../negotiation.js";
import { peerExcerpt, peerText } from "../peer-text.js";
import type { BrochureAnswer } from "../protocol/handshake.js";
import type { Connection, TransportContext } from "../transport.js";

/** The longest address a listener may answer with: a DNS name's 253 characters, a port, brackets and a scope fit well within it. */
const MAX_ANSWERED_ADDRESS = 512;

/** Throws unless the answer's address could be one: no address is that long or holds such characters. */
export function checkAnsweredAddress(answer: BrochureAnswer, url: string): void {
  if (answer.address.length > MAX_ANSWERED_ADDRESS || peerText(answer.address) !== answer.address) {
    throw protocolError(`the listener answered with ${peerExcerpt(answer.address)}, which is not an address to dial`, url);
  }
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
export function followUpAddress(
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
    return splitHostPort(address)
      .host.split("%")[0]!
      .toLowerCase()
      .replace(/^::ffff:(?=\d+\.\d+\.\d+\.\d+$)/, "");
  } catch {
    return undefined;
  }
}

function isThisMachine(host: string): boolean {
  if (host === "localhost" || host === "::1" || host.startsWith("127.")) return true;
  return Object.values(networkInterfaces()).some((addresses) => addresses?.some((a) => a.address.toLowerCase() === host));
}

/**
 * Switched to a transport of this machine alone (shm), the process that
 * listens there must be the one this side dialled, as the kernel says of
 * the first connection: else a listener could hand this side's pipe to
 * another process here. Each connection opened is proved before it is used.
 */
export class ListenerProof {
  private proven?: number;
  private readonly needed: boolean;

  constructor(
    private readonly answer: BrochureAnswer,
    dialled: Registered<TransportContext>,
    chosen: TransportContext,
    private readonly main: Connection,
    private readonly url: string,
  ) {
    this.needed = answer.transport !== dialled.name && (chosen.medium ?? "network") !== "network";
  }

  /** Throws unless the process at the other end of `c` is the one behind the first connection. */
  prove(c: Connection): void {
    if (!this.needed || (this.proven !== undefined && c.peerPid === this.proven)) return;
    const pid = c.peerPid;
    try {
      if (pid === undefined || !this.main.provePeerProcess) throw new Error("cannot tell");
      this.main.provePeerProcess(pid);
    } catch {
      throw protocolError(
        `the listener, reached at ${this.main.remoteAddress}, switched the pipe to ${this.answer.transport} at ${peerExcerpt(this.answer.address)}, where ${
          pid === undefined ? "a process this side cannot name" : `process ${pid}`
        } listens, not the one this side dialled: a listener may name only itself`,
        this.url,
      );
    }
    this.proven = pid;
  }
}
