import { constants } from "node:os";
import { connect } from "node:net";
import { describe, expect, it } from "vitest";
import { ErrorCode, TensorPipeError, fromNativeError } from "../src/errors.js";

const native = (code: string, syscall: string, message: string) => Object.assign(new Error(message), { code, syscall });

describe("errors from native backends", () => {
  it("unreachable at connect time is a refused connection", () => {
    const e = fromNativeError(native("EHOSTUNREACH", "connect", "connect: host is unreachable"), "uv://10.0.0.9:5");
    expect(e).toMatchObject({ code: ErrorCode.CONNECTION_REFUSED, errnoName: "EHOSTUNREACH", where: "uv://10.0.0.9:5" });
  });

  it("keeps errno a number as Node's SystemError does, and its name in errnoName", async () => {
    const e = fromNativeError(native("ECONNREFUSED", "connect", "connect: connection refused"));
    expect(e).toMatchObject({ errno: -constants.errno.ECONNREFUSED, errnoName: "ECONNREFUSED", syscall: "connect" });
    // The same numbers Node gives its own errors for the same event.
    const nodes = await new Promise<NodeJS.ErrnoException>((resolve) => connect(1, "127.0.0.1").on("error", resolve));
    expect(nodes).toMatchObject({ code: e.errnoName, errno: e.errno });
    // libuv's own names have numbers too; a driver's names have none.
    expect(fromNativeError(native("EOF", "read", "end of file"))).toMatchObject({ errnoName: "EOF", errno: -4095 });
    const cuda = new TensorPipeError(ErrorCode.SYSTEM, "out of memory", { errnoName: "CUDA_ERROR_OUT_OF_MEMORY" });
    expect(cuda.errnoName).toBe("CUDA_ERROR_OUT_OF_MEMORY");
    expect(cuda.errno).toBeUndefined();
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
