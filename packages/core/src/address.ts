import { ErrorCode, TensorPipeError } from "./errors.js";
import { describeValue } from "./describe-value.js";

/** "uv://127.0.0.1:1234" -> { scheme: "uv", address: "127.0.0.1:1234" }. */
export function parseUrl(url: string): {
  /** The transport's name, before "://". */
  scheme: string;
  /** The rest, as the transport reads it. */
  address: string;
} {
  if (typeof url !== "string") {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `a URL must be a string of the form scheme://address ("uv://127.0.0.1:4000"), got ${describeValue(url)}`);
  }
  const m = /^([a-zA-Z][a-zA-Z0-9+.-]*):\/\/(.*)$/.exec(url);
  if (!m) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `"${url}" is not a URL of the form scheme://address`);
  }
  return { scheme: m[1]!.toLowerCase(), address: m[2]! };
}

/**
 * Splits "host:port", "[v6]:port" and "[fe80::1%eth0]:port". The port is
 * required; 0 asks the OS for a free one.
 */
export function splitHostPort(address: string): {
  /** The host, without IPv6 brackets. */
  host: string;
  /** The port number. */
  port: number;
} {
  const m = /^\[([^\]]+)\]:(\d+)$/.exec(address) ?? /^([^:[\]]*):(\d+)$/.exec(address);
  const port = m ? Number(m[2]) : NaN;
  if (!m || !(port >= 0 && port <= 65535)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `"${address}" is not host:port (IPv6 as [addr]:port)`);
  }
  return { host: m[1]!, port };
}

/** "host:port", with an IPv6 host in brackets. */
export function joinHostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}
