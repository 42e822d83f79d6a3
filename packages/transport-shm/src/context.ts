import { randomBytes } from "node:crypto";
import {
  type Connection,
  type ListenOptions,
  ErrorCode,
  NativeConnection,
  TensorPipeError,
  connectNative,
  type TransportContext,
  type TransportListener,
  OptionChecks,
  VIABLE,
  type Viability,
  describeValue,
  fromNativeError,
  hostIdentity,
  notViable,
} from "@tensorpipe/core/backend";
import { type NativeHandshakeBounds, type NativeShmOptions, loadAddon } from "./native.js";

/** How long a listener's connection may take over the shm handshake when the listener is not told (ms). */
export const DEFAULT_SHM_HANDSHAKE_TIMEOUT = 10_000;
/** How many of a listener's connections may be in the shm handshake at once when the listener is not told. */
export const DEFAULT_SHM_MAX_PENDING_HANDSHAKES = 128;

function handshakeBounds(options: Partial<ListenOptions> | undefined): NativeHandshakeBounds {
  const handshakeTimeout = options?.handshakeTimeout ?? DEFAULT_SHM_HANDSHAKE_TIMEOUT;
  const maxPendingHandshakes = options?.maxPendingHandshakes ?? DEFAULT_SHM_MAX_PENDING_HANDSHAKES;
  if (!(handshakeTimeout > 0)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `handshakeTimeout must be a positive number of ms, got ${describeValue(handshakeTimeout)}`);
  }
  if (!(maxPendingHandshakes >= 1 && (Number.isInteger(maxPendingHandshakes) || maxPendingHandshakes === Infinity))) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `maxPendingHandshakes must be an integer from 1, got ${describeValue(maxPendingHandshakes)}`);
  }
  // The addon takes 0 for no bound.
  return {
    handshakeTimeout: Number.isFinite(handshakeTimeout) ? handshakeTimeout : 0,
    maxPendingHandshakes: Number.isFinite(maxPendingHandshakes) ? maxPendingHandshakes : 0,
  };
}

const check = new OptionChecks("ShmTransportOptions");

/** Options of the shm transport. */
export interface ShmTransportOptions {
  /**
   * Bytes of each direction's ring, a power of two (default 4 MiB). A
   * ring's pages are taken as frames touch them, up to this much, and
   * given back 5 to 6 s after it last carried a frame.
   */
  ringSize?: number | undefined;
  /** Accept peers running as another user (default: refuse them). */
  allowOtherUsers?: boolean | undefined;
  /**
   * Microseconds at most a waiting read polls the ring from Node's loop
   * before it sleeps until the peer wakes it with a byte on their Unix socket (default 200; 0 never polls; at most
   * 1,000,000, else ERR_TP_INVALID_ARG). Polling
   * trades a little CPU for latency: a kernel wake-up costs tens of
   * microseconds. Within this bound each connection learns how long to
   * poll from its waits: a peer that pauses longer than the bound, three
   * times in a row, gets polled for less and then not at all, and the
   * first wait that polling would have caught brings it back. For the
   * first 20 us of a wait, one waiting connection per thread polls every
   * waiting ring for up to 5 us on each turn of the loop, holding the loop
   * that long, unless a peer last ran on this core. With more busy
   * processes than cores, a polling reader takes turns on a core its
   * peers need: a front's workers confined to cores of their own cost
   * less CPU per request than left to share (docs/performance.md, "A
   * front and a pool of worker processes").
   */
  spinMicros?: number | undefined;
}

/**
 * Shared memory between processes of one machine: one ring per direction
 * (memfd), and an abstract Unix socket on Node's loop to meet, hand the
 * memory over, wake a sleeping reader and notice the peer's death. Addresses are
 * names: "shm://my-service"; "shm://" or "shm://*" picks a fresh one. A
 * listener bounds the hand-over of memory (the shm handshake) of the
 * connections it accepts: see listen(). Out of file descriptors, either
 * end reports ERR_TP_SYSTEM with errno EMFILE, not a protocol error.
 */
export class ShmTransport implements TransportContext {
  /** Bytes go through rings in memory both processes map. */
  readonly medium = "shared-memory" as const;
  /** A fresh name in the abstract namespace, as listen() makes for "*". */
  readonly loopbackAddress = "*";
  private closed = false;
  private viability?: Viability;
  private readonly native: NativeShmOptions;

  constructor(options: ShmTransportOptions = {}) {
    check.object(options);
    const ringSize = options.ringSize ?? 4 * 1024 * 1024;
    if (!(typeof ringSize === "number" && ringSize >= 4096 && ringSize <= 2 ** 30 && (ringSize & (ringSize - 1)) === 0)) {
      check.fail("ringSize", "a power of two from 4 KiB to 1 GiB", ringSize);
    }
    // Nanoseconds in the addon: a second bounds it well inside 64 bits.
    const spinMicros = check.number("spinMicros", options.spinMicros, 0, 1_000_000) ?? 200;
    // The uid check of every peer: a string "false" must not turn it off.
    const allowOtherUsers = check.boolean("allowOtherUsers", options.allowOtherUsers) ?? false;
    this.native = { ringSize, allowOtherUsers, spinMicros };
  }

  /** Whether the transport can work here, and if not why. */
  isViable(): Viability {
    this.viability ??= this.probe();
    return this.viability;
  }

  /** Asked once: each handshake asks isViable() again, and the probe makes a memfd. */
  private probe(): Viability {
    if (process.platform !== "linux") return notViable("shm needs Linux (memfd, abstract Unix sockets)");
    const { addon, error } = loadAddon();
    if (!addon) return notViable(`the shm addon did not load: ${error?.message}`);
    const problem = addon.probe();
    return problem ? notViable(problem) : VIABLE;
  }

  domainDescriptor(): string {
    const id = hostIdentity();
    return `shm:${id.bootId}:${id.netNs}:${id.userNs}`;
  }

  /**
   * Which part of the domain two processes differ in, and what joins them.
   * shm needs neither /dev/shm nor an IPC namespace (its rings are memfds
   * handed over a socket): one machine, one network namespace (its
   * abstract Unix socket lives there) and one user namespace.
   */
  describeMismatch(localDescriptor: string, remoteDescriptor: string): string | undefined {
    const parse = (d: string) => /^shm:([^:]+):(net:\[\d+\]):(user:\[\d+\])$/.exec(d);
    const here = parse(localDescriptor);
    const there = parse(remoteDescriptor);
    if (!here || !there) return undefined;
    const why: string[] = [];
    if (here[1] !== there[1]) why.push("another machine (or boot): shared memory only joins processes of one machine");
    else {
      if (here[2] !== there[2]) {
        why.push(
          "network namespaces differ: shm meets over an abstract Unix socket, which lives in a network namespace; run both in one (docker run --network=host, or --network=container:<other>; containers of one Kubernetes pod share it)",
        );
      }
      if (here[3] !== there[3]) why.push("user namespaces differ: run both in one (docker run --userns=host, or the same user namespace remapping)");
    }
    return why.length > 0 ? why.join("; ") : undefined;
  }

  private addon() {
    const { addon, error } = loadAddon();
    if (!addon) throw new TensorPipeError(ErrorCode.NOT_VIABLE, `shm transport unavailable: ${error?.message}`);
    if (this.closed) throw new TensorPipeError(ErrorCode.CLOSED, "shm transport was closed");
    return addon;
  }

  /**
   * Listens at the name `address`. Each connection first exchanges the
   * rings' memory with its peer (the shm handshake) before `onConnection`
   * sees it: `options` bound that (defaults 10 s and 128), as the core's
   * Listener bounds its own handshake after it. A connection past
   * `handshakeTimeout`, or the oldest one when one more than
   * `maxPendingHandshakes` arrives, is closed and reported to `onError`
   * with ERR_TP_TIMEOUT. Out of file descriptors, waiting connections are
   * turned away (closed at once) and `onError` gets ERR_TP_SYSTEM with errno
   * EMFILE (or ENFILE), once each time; the listener goes on.
   */
  async listen(
    address: string,
    onConnection: (c: Connection) => void,
    onError?: (e: Error) => void,
    options?: Partial<ListenOptions>,
  ): Promise<TransportListener> {
    const addon = this.addon();
    const bounds = handshakeBounds(options);
    const name = address === "" || address === "*" ? `tensorpipe-js-${process.pid}-${randomBytes(6).toString("hex")}` : address;
    try {
      return new addon.ShmListener(
        name,
        this.native,
        (err, conn) => {
          if (err) onError?.(fromNativeError(err, `shm listener on ${address}`));
          else onConnection(new NativeConnection(conn!, "shm"));
        },
        bounds,
      );
    } catch (e) {
      throw fromNativeError(e, `shm listen on "${name}"`);
    }
  }

  /** Opens a connection to a listener at `address`. */
  async connect(address: string, options?: { signal?: AbortSignal }): Promise<Connection> {
    const addon = this.addon();
    return connectNative((cb) => addon.connect(address, this.native, cb), "shm", `shm://${address}`, options?.signal);
  }

  /** Refuses new listeners and connections; those open stay open. */
  async close(): Promise<void> {
    this.closed = true;
  }
}
