import { describe, expect, it } from "vitest";
import { ErrorCode, fromNativeError } from "../src/errors.js";

const native = (code: string, syscall: string, message: string) => Object.assign(new Error(message), { code, syscall });

describe("errors from native backends", () => {
  it("unreachable at connect time is a refused connection", () => {
    const e = fromNativeError(native("EHOSTUNREACH", "connect", "connect: host is unreachable"), "uv://10.0.0.9:5");
    expect(e).toMatchObject({ code: ErrorCode.CONNECTION_REFUSED, errno: "EHOSTUNREACH", where: "uv://10.0.0.9:5" });
  });

  it("unreachable on a connection that was up is a broken connection (keepalive or retransmissions gave up)", () => {
    for (const syscall of ["read", "write", "recv", "send"]) {
      const e = fromNativeError(native("EHOSTUNREACH", syscall, `${syscall}: host is unreachable`));
      expect(e).toMatchObject({ code: ErrorCode.CONNECTION_RESET, message: `${syscall}: host is unreachable` });
    }
    expect(fromNativeError(native("ETIMEDOUT", "read", "read: connection timed out"))).toMatchObject({
      code: ErrorCode.CONNECTION_RESET,
      message: "read: connection timed out",
    });
  });

  it("names the call once, whatever the message already says", () => {
    expect(fromNativeError(native("EMFILE", "accept", "accept: too many open files")).message).toBe("accept: too many open files");
    expect(fromNativeError(native("EMFILE", "accept", "too many open files")).message).toBe("accept: too many open files");
  });
});
