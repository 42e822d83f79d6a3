import { getSystemErrorMap } from "node:util";
import type { FlightEvent } from "./flight-recorder.js";
import { safeText } from "./peer-text.js";

/**
 * Errors are values with a stable `code`. What the system said underneath
 * is kept as Node keeps it: `errno` (a number), `errnoName` and `syscall`.
 */
export const ErrorCode = {
  /** Nobody listens at the address (ECONNREFUSED) or it is unreachable. */
  CONNECTION_REFUSED: "ERR_TP_CONNECTION_REFUSED",
  /** The peer closed its end (EOF) or died; in-flight data is lost. */
  PEER_CLOSED: "ERR_TP_PEER_CLOSED",
  /** The connection broke under us: ended inside a frame or a message, timed out, unreachable once connected. */
  CONNECTION_RESET: "ERR_TP_CONNECTION_RESET",
  /** The peer sent bytes that violate the wire protocol. */
  PROTOCOL: "ERR_TP_PROTOCOL",
  /** Bytes arrived other than they were sent: a check of a channel's (a checksum) found them changed. */
  DATA_CORRUPTED: "ERR_TP_DATA_CORRUPTED",
  /** The two ends found no transport or channel in common. */
  NEGOTIATION: "ERR_TP_NEGOTIATION",
  /** A deadline passed. */
  TIMEOUT: "ERR_TP_TIMEOUT",
  /** An AbortSignal fired. */
  ABORTED: "ERR_TP_ABORTED",
  /** This side closed the pipe, listener, connection or context. */
  CLOSED: "ERR_TP_CLOSED",
  /** The caller passed something unusable. */
  INVALID_ARG: "ERR_TP_INVALID_ARG",
  /** The peer's credentials are not allowed (another user, ...). */
  PERMISSION_DENIED: "ERR_TP_PERMISSION_DENIED",
  /** A backend cannot run on this machine. */
  NOT_VIABLE: "ERR_TP_NOT_VIABLE",
  /** Any other system error; see `errnoName` and `syscall`. */
  SYSTEM: "ERR_TP_SYSTEM",
  /** A cluster member's name is held by another live member. */
  NAME_TAKEN: "ERR_TP_NAME_TAKEN",
  /** No cluster member has that name (in the membership last seen). */
  NOT_FOUND: "ERR_TP_NOT_FOUND",
  /** A cluster's store cannot be reached; pipes already open go on. */
  UNAVAILABLE: "ERR_TP_UNAVAILABLE",
  /** The peer at the address is not the one asked for: its handshake gave another name. */
  WRONG_PEER: "ERR_TP_WRONG_PEER",
} as const;

export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

/** What a TensorPipeError carries besides its code and message. */
export interface TensorPipeErrorOptions {
  /** The error underneath (a native error, an abort reason). */
  cause?: unknown;
  /**
   * The name of the error the OS, libuv or a driver reported ("ECONNRESET",
   * "EOF", "CUDA_ERROR_OUT_OF_MEMORY"); `errno` is derived from it.
   */
  errnoName?: string | undefined;
  /**
   * The libuv number, where the system gave one that its name does not say
   * (Node calls a DNS lookup's EAI_NONAME, -3008, ENOTFOUND).
   */
  errno?: number | undefined;
  /** The system call that failed, where one did. */
  syscall?: string | undefined;
  /** Where it happened: an address, a pipe or a backend name. */
  where?: string | undefined;
}

/**
 * Marks TensorPipeErrors of every copy of this package: an application
 * with two (a backend that brought its own) still tells them apart.
 */
const BRAND = Symbol.for("tensorpipe.TensorPipeError");

/** Characters of an error's message, past which it is cut (a negotiation's reasons stay well within it). */
const MAX_MESSAGE = 8192;

/** Every error the library gives: a stable `code`, what failed and where. */
export class TensorPipeError extends Error {
  /** `instanceof TensorPipeError` holds for the errors of any copy of @tensorpipe/core. */
  static override [Symbol.hasInstance](value: unknown): boolean {
    // biome-ignore lint/complexity/noThisInStatic: a subclass's instanceof tests its own prototype chain.
    if (this !== TensorPipeError) return Function.prototype[Symbol.hasInstance].call(this, value);
    return typeof value === "object" && value !== null && (value as { [BRAND]?: unknown })[BRAND] === true;
  }

  /** What kind of failure (ERR_TP_*). */
  readonly code: ErrorCode;
  /**
   * The libuv error number of a system error, negative as in Node's
   * SystemError (-104 for ECONNRESET on Linux): `-os.constants.errno.X`,
   * or a libuv-only one such as UV_EOF. Absent for errors of no system.
   */
  readonly errno?: number;
  /** The name of the error the system or a driver reported: "ECONNRESET", "EOF", "CUDA_ERROR_OUT_OF_MEMORY". */
  readonly errnoName?: string;
  /** The system call that failed, where one did. */
  readonly syscall?: string;
  /** Where it happened: an address, a pipe or a backend. */
  readonly where?: string;
  /**
   * The last events of the pipe or handshake this error ended, oldest
   * first (ContextOptions.flightRecorder): what it was doing when it failed.
   */
  flightRecord?: readonly FlightEvent[];

  constructor(code: ErrorCode, message: string, options: TensorPipeErrorOptions = {}) {
    // Messages quote what peers sent: one line, escaped, of bounded length, whatever they sent.
    super(safeText(options.where ? `${message} (${options.where})` : message, MAX_MESSAGE), { cause: options.cause });
    this.name = "TensorPipeError";
    this.code = code;
    if (options.errnoName !== undefined) {
      this.errnoName = options.errnoName;
      const errno = options.errno ?? errnoNumber(options.errnoName);
      if (errno !== undefined) this.errno = errno;
    }
    if (options.syscall !== undefined) this.syscall = options.syscall;
    if (options.where !== undefined) this.where = options.where;
  }
}
Object.defineProperty(TensorPipeError.prototype, BRAND, { value: true });

let errnoByName: Map<string, number> | undefined;

/** The libuv number of an error name, as Node's SystemError gives it; undefined for a name no system has. */
function errnoNumber(name: string): number | undefined {
  if (!errnoByName) {
    errnoByName = new Map();
    for (const [errno, [known]] of getSystemErrorMap()) errnoByName.set(known, errno);
  }
  return errnoByName.get(name);
}

/** Whether `value` is a TensorPipeError, of this copy of @tensorpipe/core or another. */
export function isTensorPipeError(value: unknown): value is TensorPipeError {
  return value instanceof TensorPipeError;
}

/** ERR_TP_PROTOCOL: the peer sent bytes that break the wire protocol. */
export function protocolError(message: string, where?: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.PROTOCOL, message, { where });
}

/** ERR_TP_CLOSED: `what` was closed on this side. */
export function closedError(what: string): TensorPipeError {
  return new TensorPipeError(ErrorCode.CLOSED, `${what} was closed`);
}

const errnoToCode: Record<string, ErrorCode> = {
  ECONNREFUSED: ErrorCode.CONNECTION_REFUSED,
  EHOSTUNREACH: ErrorCode.CONNECTION_REFUSED,
  ENETUNREACH: ErrorCode.CONNECTION_REFUSED,
  EADDRNOTAVAIL: ErrorCode.CONNECTION_REFUSED,
  ENOENT: ErrorCode.CONNECTION_REFUSED,
  EOF: ErrorCode.PEER_CLOSED,
  ESRCH: ErrorCode.PEER_CLOSED,
  ECONNRESET: ErrorCode.CONNECTION_RESET,
  EPIPE: ErrorCode.CONNECTION_RESET,
  ETIMEDOUT: ErrorCode.CONNECTION_RESET,
  ECONNABORTED: ErrorCode.CONNECTION_RESET,
  ENOTCONN: ErrorCode.CONNECTION_RESET,
  ESHUTDOWN: ErrorCode.CONNECTION_RESET,
  ECANCELED: ErrorCode.CLOSED,
  EACCES: ErrorCode.PERMISSION_DENIED,
  EPERM: ErrorCode.PERMISSION_DENIED,
};

const errnoText: Record<string, string> = {
  ECONNREFUSED: "connection refused: nobody listens there",
  EOF: "peer closed the connection",
  ESRCH: "peer process is gone",
  ECONNRESET: "connection reset by peer",
  EPIPE: "peer is gone (broken pipe)",
  ETIMEDOUT: "connection timed out",
  EHOSTUNREACH: "host is unreachable",
  ENETUNREACH: "network is unreachable",
  ECANCELED: "operation canceled: connection closed",
};

/**
 * Unreachable on a connection that was up (a read or write call) means that it
 * broke: the kernel reports it when its retransmissions or keepalive probes
 * got no answer. At connect time it means nobody can be reached there.
 */
const brokenOnceUp = new Set(["EHOSTUNREACH", "ENETUNREACH"]);
const dataCalls = new Set(["read", "write", "recv", "send", "recvmsg", "sendmsg", "readv", "writev"]);
const writeCalls = new Set(["write", "send", "sendmsg", "writev"]);

/**
 * Turns an error reported by a native backend ({ code: "ECONNRESET" | "EOF" |
 * "ERR_TP_...", message, syscall, betweenFrames? }) into a TensorPipeError:
 * the code follows the errno and the syscall (ECONNRESET or EPIPE on a
 * write is the peer gone; ECONNRESET on a read is a broken connection,
 * unless `betweenFrames` says it came between frames: the peer's end).
 */
export function fromNativeError(err: unknown, where?: string): TensorPipeError {
  if (err instanceof TensorPipeError) return err;
  const e = err as { code?: string; message?: string; syscall?: string };
  const native = e?.code ?? "";
  if (native.startsWith("ERR_TP_")) {
    return new TensorPipeError(native as ErrorCode, e.message ?? native, { where, cause: err });
  }
  // A connection reset between frames is how a peer that died with bytes
  // of ours unread ends over TCP: the peer's end, as over shm.
  if (native === "ECONNRESET" && (err as { betweenFrames?: boolean }).betweenFrames === true) {
    return new TensorPipeError(ErrorCode.PEER_CLOSED, "read: peer closed the connection (reset: it went with bytes of this side's unread)", {
      where,
      errnoName: native,
      syscall: e.syscall,
      cause: err,
    });
  }
  const up = brokenOnceUp.has(native) && dataCalls.has(e.syscall ?? "");
  // A write refused with a reset or a broken pipe: the peer is gone, as a
  // reader learns from a reset between frames (above).
  const peerGone = (native === "ECONNRESET" || native === "EPIPE") && writeCalls.has(e.syscall ?? "");
  const code = up ? ErrorCode.CONNECTION_RESET : peerGone ? ErrorCode.PEER_CLOSED : (errnoToCode[native] ?? ErrorCode.SYSTEM);
  const text = errnoText[native] ?? e?.message ?? String(err);
  const said = e.syscall && !text.startsWith(`${e.syscall}: `) ? `${e.syscall}: ${text}` : text;
  return new TensorPipeError(code, said, {
    where,
    errnoName: native || undefined,
    syscall: e?.syscall,
    cause: err,
  });
}
