/** The listener may name only itself: where the connections its answer asks for may go. */
import { describe, expect, it } from "vitest";
import { ErrorCode } from "../src/errors.js";
import { ListenerProof } from "../src/handshake/address-policy.js";
import type { Registered } from "../src/negotiation.js";
import type { BrochureAnswer } from "../src/protocol/handshake.js";
import type { Connection, TransportContext } from "../src/transport.js";

const answer = { transport: "shm", address: "shm://listener" } as BrochureAnswer;
const uv = { name: "uv", context: { medium: "network" } } as unknown as Registered<TransportContext>;
const shm = { medium: "shared-memory" } as unknown as TransportContext;

/** The first connection, over which the kernel vouches for process `pid` alone. */
function mainTo(pid: number): Connection {
  return {
    remoteAddress: "127.0.0.1:5",
    provePeerProcess(p: number) {
      if (p !== pid) throw new Error("another process");
      return { pid: p, uids: [] };
    },
  } as unknown as Connection;
}

describe("a switch to shm", () => {
  it("goes on to the process dialled, and to no other, nor to one this side cannot name", () => {
    const proof = new ListenerProof(answer, uv, shm, mainTo(42), "uv://127.0.0.1:5");
    expect(() => proof.prove({ peerPid: 42 } as Connection)).not.toThrow();
    expect(() => proof.prove({ peerPid: 43 } as Connection)).toThrow(
      expect.objectContaining({ code: ErrorCode.PROTOCOL, message: expect.stringMatching(/process 43 listens, not the one this side dialled/) }),
    );
    const first = new ListenerProof(answer, uv, shm, mainTo(42), "uv://127.0.0.1:5");
    expect(() => first.prove({ peerPid: undefined } as Connection)).toThrow(
      expect.objectContaining({ code: ErrorCode.PROTOCOL, message: expect.stringMatching(/a process this side cannot name/) }),
    );
  });

  it("asks nothing where the pipe stays on the transport dialled", () => {
    const same = new ListenerProof({ ...answer, transport: "uv" }, uv, shm, mainTo(42), "uv://127.0.0.1:5");
    expect(() => same.prove({ peerPid: undefined } as Connection)).not.toThrow();
  });
});
