import { type ChildProcess, fork } from "node:child_process";
import { fileURLToPath } from "node:url";
import { type ConformanceSide, type MessageSpec, type Received, type ReceivedDescriptor, handled } from "./conformance-side.js";

/** A request to the peer process, answered by id. */
export type PeerRequest =
  | { op: "connect"; url: string; channel: string; transport: string }
  | { op: "channelFor" }
  | { op: "write"; spec: MessageSpec }
  | { op: "receive" }
  | { op: "readDescriptor" }
  | { op: "close" }
  | { op: "reset" };

export type PeerReply = { id: number; ok: true; value?: unknown } | { id: number; ok: false; error: { code?: string; message: string } };

/** An error the peer process met, with its code kept so that tests can match it. */
class PeerError extends Error {
  constructor(
    message: string,
    readonly code?: string,
  ) {
    super(message);
  }
}

/**
 * The connecting end of the suite's pipe, played by a second process
 * (conformance-peer-main) that loads the channel from `module`: for
 * channels that cannot talk to themselves in one process, as CUDA IPC
 * handles do not open where they were made.
 */
export class RemoteSide implements ConformanceSide {
  private readonly child: ChildProcess;
  private readonly pending = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private nextId = 1;
  private exited: Error | undefined;

  constructor(module: string | URL) {
    const main = fileURLToPath(new URL("./conformance-peer-main.js", import.meta.url));
    const href = module instanceof URL ? module.href : module;
    this.child = fork(main, [href], { serialization: "advanced", stdio: ["ignore", "inherit", "inherit", "ipc"] });
    this.child.on("message", (reply: PeerReply) => {
      const p = this.pending.get(reply.id);
      if (!p) return;
      this.pending.delete(reply.id);
      if (reply.ok) p.resolve(reply.value);
      else p.reject(new PeerError(`peer process: ${reply.error.message}`, reply.error.code));
    });
    this.child.on("exit", (code, signal) => {
      this.exited = new Error(`the peer process exited (${signal ?? code})`);
      for (const p of this.pending.values()) p.reject(this.exited);
      this.pending.clear();
    });
  }

  private call<T>(request: PeerRequest): Promise<T> {
    if (this.exited) return Promise.reject(this.exited);
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject });
      this.child.send({ id, ...request });
    });
  }

  connect(url: string, channel: string, transport: string): Promise<void> {
    return this.call({ op: "connect", url, channel, transport });
  }

  channelFor(): Promise<string | undefined> {
    return this.call({ op: "channelFor" });
  }

  write(spec: MessageSpec): Promise<void> {
    return handled(this.call({ op: "write", spec }));
  }

  receive(): Promise<Received> {
    return this.call({ op: "receive" });
  }

  readDescriptor(): Promise<ReceivedDescriptor> {
    return this.call({ op: "readDescriptor" });
  }

  close(): Promise<void> {
    return this.call({ op: "close" });
  }

  /** Closes the peer's context and frees what it made, ready for the next connect. */
  reset(): Promise<void> {
    return this.call({ op: "reset" });
  }

  /** Ends the peer process. */
  async stop(): Promise<void> {
    if (this.exited) return;
    const gone = new Promise((resolve) => this.child.once("exit", resolve));
    this.child.disconnect();
    await gone;
  }
}
