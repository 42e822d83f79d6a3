/**
 * The stable interface a transport backend implements. A transport carries
 * frames (length-delimited byte strings) between two processes, in order.
 * Third-party transports implement these three interfaces against core only.
 */
import type { Viability } from "./viability.js";

/** A transport backend: registered with Context.registerTransport(), it listens and connects, and carries a pipe's control frames and payloads. */
export interface TransportContext {
  /** Whether the transport can work on this machine (a viable: false transport is never offered). */
  isViable(): Viability;
  /**
   * Two transports can talk only if their domain descriptors are equal
   * strings (e.g. "uv:*" anywhere, or a machine id for shared memory).
   */
  domainDescriptor(): string;
  /**
   * Why two processes whose domain descriptors differ cannot use this
   * transport together, in words, with what would join them (a container
   * flag, say); undefined when it cannot tell. Shown in negotiation's
   * reasons (pipe.path, NODE_DEBUG, errors).
   */
  describeMismatch?(localDescriptor: string, remoteDescriptor: string): string | undefined;
  /** Extra URL schemes accepted for this transport ("tcp" for "uv"). */
  readonly aliases?: readonly string[];
  /**
   * How it moves bytes, for channels that choose by it (cma sends more
   * inline over shared memory); default "network".
   */
  readonly medium?: TransportMedium;
  /**
   * An address this process can listen on and reach itself at
   * ("127.0.0.1:0"), for Context.warmUp(); a transport without one is not
   * warmed.
   */
  readonly loopbackAddress?: string;
  /**
   * Starts listening at `address` (the part of the URL after "scheme://"),
   * calling `onConnection` for each accepted connection and `onError` when
   * accepting one failed (out of file descriptors, ...); it goes on listening.
   */
  listen(
    address: string,
    onConnection: (connection: Connection) => void,
    onError?: (error: Error) => void,
    options?: ListenOptions,
  ): Promise<TransportListener>;
  /** Opens a connection to a listener at `address`; `signal` abandons the attempt. */
  connect(address: string, options?: { signal?: AbortSignal }): Promise<Connection>;
  /** Releases what the backend holds; called by Context.close(). */
  close(): Promise<void>;
}

/**
 * What a listener asks of a transport that runs a handshake of its own
 * before it hands a connection over (shm's exchange of memory): the same
 * bounds the Listener keeps on the TensorPipe handshake after it.
 */
export interface ListenOptions {
  /** A connection still in the transport's handshake after this long (ms) is dropped. */
  handshakeTimeout: number;
  /**
   * At most this many connections may be in the transport's handshake at
   * once; one more drops the oldest, so that silent peers cannot keep
   * real ones out.
   */
  maxPendingHandshakes: number;
}

/** The process at the other end of a connection, as the kernel knows it (Connection.provePeerProcess). */
export interface PeerProcess {
  /** Its pid, in this process's pid namespace. */
  pid: number;
  /** Its real, effective, saved and file-system uids, read while it was proven. */
  uids: readonly [number, number, number, number];
}

/** How a transport moves bytes: copies through memory shared by the two processes, or a socket's stream. */
export type TransportMedium = "shared-memory" | "network";

/** What TransportContext.listen() returns: accepting until closed. */
export interface TransportListener {
  /** The bound address as the peer should use it ("127.0.0.1:41234"). */
  address(): string;
  /** Stops accepting; connections already accepted stay open. */
  close(): void;
}

/**
 * What a Connection's write or readInto may return when it finished before
 * returning: every byte has left (or reached) the caller's memory, so the
 * views and the array that held them are free at once. Returning one shared
 * settled promise costs no allocation per frame, and callers that see it
 * reuse their own scratch memory.
 */
export const DONE: Promise<void> = Promise.resolve();

let oneFrame: ArrayBufferView[] = [];
const NO_BYTES = new Uint8Array(0);

/**
 * `connection.write([frame])` with no array per call: the array is reused
 * while writes finish at once (DONE), replaced when a write holds on to it.
 */
export function writeFrame(connection: Connection, frame: ArrayBufferView): Promise<void> {
  const frames = oneFrame;
  frames[0] = frame;
  const written = connection.write(frames);
  if (written === DONE) frames[0] = NO_BYTES;
  else oneFrame = [];
  return written;
}

/**
 * A bidirectional stream of frames. Operations complete in the order they
 * were issued. On failure every pending and later operation rejects with the
 * same TensorPipeError.
 */
export interface Connection {
  /**
   * Writes each view as one frame, in order, straight from its memory. The
   * caller must not modify the views or the array until the promise settles
   * (at once when it is DONE).
   */
  write(frames: readonly ArrayBufferView[]): Promise<void>;
  /**
   * Reads the next frame into fresh memory; a longer frame than
   * `maxLength` is ERR_TP_PROTOCOL, marked `overLimit: true` (on the error
   * or its cause) so that a pipe can name the option that sets the limit.
   */
  read(maxLength: number): Promise<Uint8Array>;
  /**
   * read() with a callback instead of a promise, for a caller that reads
   * frame after frame and wants no allocation per frame for it. The
   * callback may run before readFrame returns, when the frame is already
   * here. The frame may be lent: its bytes are valid until the callback
   * returns, and a later frame may overwrite them; copy what you keep
   * (a transport may as well give fresh memory). Optional: callers fall
   * back to read().
   */
  readFrame?(maxLength: number, callback: FrameCallback): void;
  /** Reads the next frame straight into `target`, whose size must equal the frame's. */
  readInto(target: ArrayBufferView): Promise<void>;
  /** Closes the connection; pending operations reject with `error` or ERR_TP_CLOSED. */
  close(error?: Error): void;
  /** Settles when the connection is closed, with the error that closed it, if any. */
  readonly closed: Promise<Error | undefined>;
  /** This end's address ("127.0.0.1:41234"), or "" where the transport has none. */
  readonly localAddress: string;
  /** The peer's address, or "" where the transport has none. */
  readonly remoteAddress: string;
  /**
   * The pid of the process at the other end, as the kernel recorded it
   * when the connection was made (a Unix socket's SO_PEERCRED); undefined
   * where the transport cannot tell. A dialler switched to such a
   * transport proves with it that the process there is the one it dialled.
   */
  readonly peerPid?: number | undefined;
  /**
   * Hands the underlying stream socket over to a channel that does its own
   * I/O on it (mpt's lanes on their own threads), once the writes in flight
   * are done; no read may be pending. The connection is closed for its own
   * use, the socket stays open, held by the DetachedSocket until the caller
   * takes or closes it.
   * Resolves null, leaving the connection as it is, where there is no
   * socket to hand over (shared memory). Optional: a transport without it
   * is treated as returning null.
   */
  detach?(): Promise<DetachedSocket | null>;
  /**
   * Proves from the kernel's own records, not from anything the peer
   * said, that process `pid` of this machine holds the other end of this
   * connection: a Unix socket's peer credentials, or for TCP over this
   * machine's addresses the socket table and /proc. Throws
   * ERR_TP_PERMISSION_DENIED when it does not (or when the peer is on
   * another machine). Optional: a transport without it cannot carry a
   * channel that acts on a peer's pid (cma).
   */
  provePeerProcess?(pid: number): PeerProcess;
  /**
   * Whether the peer has sent bytes that no read has taken yet: a listener
   * under a burst of connections does not take its own backlog for peers
   * that say nothing. Optional: a connection without it counts as silent
   * until its first frame is read.
   */
  hasPendingInput?(): boolean;
  /**
   * Serves the reads that wait on this connection from bytes that have
   * arrived already, now rather than when the loop next polls it: for a
   * channel that must take what its peer sent on one connection before it
   * acts on what came on another (cma reads a release before it grows its
   * pool for the loan an answer prompted). Promises settle as ever;
   * readFrame() callbacks run within the call. Optional: without it such
   * reads are served at the loop's next poll.
   */
  serveArrived?(): void;
}

/** Told of the next frame by Connection.readFrame(): an error, or the frame (lent: valid until this returns). */
export type FrameCallback = (err: Error | null, frame?: Uint8Array) => void;

/**
 * A stream socket taken over from a Connection (see Connection.detach). Its
 * descriptor stays this object's until taken or closed, and is closed with
 * the object's environment (a worker's end) or when the object is
 * collected: a socket caught between two owners when a worker is
 * terminated is not left open for the life of the process. A taker that
 * keeps the socket duplicates `fd` in native code and then calls close(),
 * or calls take().
 */
export interface DetachedSocket {
  /** The descriptor of a connected stream socket, valid until take() or close(). */
  readonly fd: number;
  /** Bytes the connection had read from the socket but not yet delivered: they come first. */
  readonly readAhead: Uint8Array;
  /** Gives the descriptor up: the caller owns it from here and must close it. Throws ERR_TP_CLOSED once taken or closed. */
  take(): number;
  /** Closes the descriptor unless it was taken; a second call does nothing. */
  close(): void;
}
