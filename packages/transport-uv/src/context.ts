import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { networkInterfaces } from "node:os";
import {
  type Connection,
  ErrorCode,
  NativeConnection,
  TensorPipeError,
  connectNative,
  type TransportContext,
  type TransportListener,
  OptionChecks,
  type Viability,
  VIABLE,
  fromNativeError,
  notViable,
  splitHostPort,
} from "@tensorpipe/core/backend";
import { loadAddon } from "./native.js";

const check = new OptionChecks("UvTransportOptions");

/** Options of the uv transport. */
export interface UvTransportOptions {
  /**
   * Network interface to use (e.g. "eth0"): listening on host "*" binds to
   * its address, and outgoing connections leave from it.
   */
  interface?: string | undefined;
  /** Address family for the interface's address; 4 unless it has none. */
  family?: 4 | 6 | undefined;
  /**
   * How long a peer may stay silent, in ms, before its connections fail
   * with ERR_TP_CONNECTION_RESET (errno ETIMEDOUT): a host that lost power,
   * a cut link, a firewall or NAT that dropped the connection. TCP keepalive
   * probes idle connections, and while bytes of this side wait for the
   * peer, a connection from which nothing came back for this long (no
   * acknowledgement, no answer to TCP's probes of a shut window) fails: a
   * reader that is alive but busy, however long, is waited for. Nothing
   * changes on the wire for the peer (upstream TensorPipe included). mpt's
   * lanes, taken over from these connections, keep the keepalive; the
   * pipe's first connection watches for the rest.
   * Default 30000; 0 turns it off.
   */
  peerTimeout?: number | undefined;
}

/** The default of UvTransportOptions.peerTimeout. */
export const DEFAULT_PEER_TIMEOUT = 30_000;

/** The address of a network interface by name, IPv4 first unless told. */
export function interfaceAddress(name: string, family?: 4 | 6): string {
  const entries = networkInterfaces()[name];
  if (!entries || entries.length === 0) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `no network interface named "${name}"`);
  }
  const wanted = family ? [`IPv${family}`] : ["IPv4", "IPv6"];
  for (const f of wanted) {
    const e = entries.find((x) => x.family === f);
    if (e) return e.family === "IPv6" && e.scopeid ? `${e.address}%${name}` : e.address;
  }
  throw new TensorPipeError(ErrorCode.INVALID_ARG, `interface "${name}" has no IPv${family} address`);
}

async function resolveHost(host: string): Promise<string> {
  const bare = host.split("%")[0]!;
  if (isIP(bare)) return host;
  try {
    return (await lookup(host)).address;
  } catch (e) {
    const { code, errno, syscall } = e as NodeJS.ErrnoException;
    throw new TensorPipeError(ErrorCode.CONNECTION_REFUSED, `cannot resolve host "${host}"`, { cause: e, errnoName: code, errno, syscall });
  }
}

class UvTransportListener implements TransportListener {
  constructor(private readonly native: { address(): string; close(): void }) {}

  address(): string {
    return this.native.address();
  }

  close(): void {
    this.native.close();
  }
}

/**
 * TCP on libuv, wire-compatible with upstream TensorPipe's "uv" transport.
 * Addresses are "host:port", IPv6 as "[addr]:port" (link-local with %scope).
 */
export class UvTransport implements TransportContext {
  readonly aliases = ["tcp"] as const;
  readonly loopbackAddress = "127.0.0.1:0";
  private closed = false;

  private readonly peerTimeout: number;

  constructor(private readonly options: UvTransportOptions = {}) {
    check.object(options);
    this.peerTimeout = check.wholeNumber("peerTimeout", options.peerTimeout, 0, 2 ** 31 - 1, "ms") ?? DEFAULT_PEER_TIMEOUT;
    check.string("interface", options.interface);
    check.oneOf("family", options.family, [4, 6]);
  }

  /** Whether the transport can work here, and if not why. */
  isViable(): Viability {
    const { error } = loadAddon();
    return error ? notViable(`the uv addon did not load: ${error.message}`) : VIABLE;
  }

  domainDescriptor(): string {
    return "uv:*";
  }

  private addon() {
    const { addon, error } = loadAddon();
    if (!addon) throw new TensorPipeError(ErrorCode.NOT_VIABLE, `uv transport unavailable: ${error?.message}`);
    if (this.closed) throw new TensorPipeError(ErrorCode.CLOSED, "uv transport was closed");
    return addon;
  }

  async listen(address: string, onConnection: (c: Connection) => void, onError?: (e: Error) => void): Promise<TransportListener> {
    const addon = this.addon();
    let { host, port } = splitHostPort(address);
    if (host === "*" && this.options.interface) host = interfaceAddress(this.options.interface, this.options.family);
    if (host === "" || host === "*") {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        `listen address "${address}" names no host: give one (0.0.0.0 to bind every interface) or set the interface option`,
      );
    }
    host = await resolveHost(host);
    try {
      const native = new addon.UvListener(host, port, this.peerTimeout, (err, conn) => {
        if (err) onError?.(fromNativeError(err, `uv listener on ${address}`));
        else onConnection(new NativeConnection(conn!, "uv"));
      });
      return new UvTransportListener(native);
    } catch (e) {
      throw fromNativeError(e, `uv listen on ${address}`);
    }
  }

  /** Opens a connection to a listener at `address`. */
  async connect(address: string, options?: { signal?: AbortSignal }): Promise<Connection> {
    const addon = this.addon();
    const { host, port } = splitHostPort(address);
    const ip = await resolveHost(host);
    const bindHost = this.options.interface ? interfaceAddress(this.options.interface, this.options.family) : null;
    return connectNative((cb) => addon.connect(ip, port, bindHost, this.peerTimeout, cb), "uv", `uv://${address}`, options?.signal);
  }

  /** Refuses new listeners and connections; those open stay open. */
  async close(): Promise<void> {
    this.closed = true;
  }
}
