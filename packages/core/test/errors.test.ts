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

describe("errors of two copies of the package", () => {
  it("are TensorPipeErrors to each other: instanceof and isTensorPipeError hold across copies, and for nothing else", async () => {
    // Another instance of the built module, as a second copy in node_modules would load.
    const here = await import(new URL("../dist/errors.js", import.meta.url).href);
    const other = await import(`${new URL("../dist/errors.js", import.meta.url).href}?another-copy`);
    expect(other.TensorPipeError).not.toBe(here.TensorPipeError);
    const e = new other.TensorPipeError(ErrorCode.CLOSED, "from the other copy");
    expect(e instanceof here.TensorPipeError).toBe(true);
    expect(here.isTensorPipeError(e)).toBe(true);
    expect(e instanceof Error).toBe(true);
    for (const not of [new Error("plain"), {}, null, "ERR_TP_CLOSED", Object.assign(new Error("coded"), { code: ErrorCode.CLOSED })]) {
      expect(not instanceof here.TensorPipeError).toBe(false);
      expect(here.isTensorPipeError(not)).toBe(false);
    }
  });
});
