import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

/** A line the peer printed: a pipe that ended, and why. */
export interface PeerEvent {
  /** What happened ("pipe-ended", ...). */
  event: string;
  /** The error's code. */
  code?: string;
  /** The error's message. */
  message?: string;
}

/** The peer process (dist/peer.js) and where it listens. */
export interface PeerProcess {
  /** The uv URL; the listener offers its other transports in negotiation. */
  url: string;
  /** Every URL it listens on, one per transport. */
  urls: string[];
  /** The node:net echo server's port. */
  echoPort: number;
  /** The node:net sink server's port. */
  sinkPort: number;
  /** zeromq's echo and sink endpoints, or why the peer has none. */
  zmq:
    | {
        /** The echo socket's endpoint. */
        echo: string;
        /** The sink socket's endpoint. */
        sink: string;
      }
    | {
        /** Why the peer has no zeromq sockets. */
        missing: string;
      };
  /** Its process id. */
  pid: number;
  /** The child process. */
  child: ChildProcess;
  /** Lines the peer printed after its addresses (pipes that ended, and why). */
  events: PeerEvent[];
  /** Ends it (closing its stdin), killing it after 5 s. */
  stop(): Promise<void>;
}

/** Where to start the peer. */
export interface SpawnOptions {
  /** Run it inside this network namespace (see TestNetwork). */
  netns?: string;
}

/** Starts dist/peer.js in a child process and waits for its addresses. */
export async function spawnPeer(
  host = "127.0.0.1",
  extraArgs: readonly string[] = [],
  options: SpawnOptions = {},
): Promise<PeerProcess> {
  // From src/ (under vitest) and from dist/ alike: the built peer.
  const script = fileURLToPath(new URL("../dist/peer.js", import.meta.url));
  // TP_PEER_NODE_ARGS="--cpu-prof": extra node flags for the peer, to profile it.
  const nodeArgs = (process.env.TP_PEER_NODE_ARGS ?? "").split(" ").filter(Boolean);
  const argv = [...nodeArgs, script, host, ...extraArgs];
  const child = options.netns
    ? spawn("ip", ["netns", "exec", options.netns, process.execPath, ...argv], { stdio: ["pipe", "pipe", "inherit"] })
    : spawn(process.execPath, argv, { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout! });
  const first = await new Promise<string>((resolve, reject) => {
    lines.once("line", resolve);
    child.once("exit", (code) => reject(new Error(`peer exited with ${code} before listening`)));
  });
  const info = JSON.parse(first) as Omit<PeerProcess, "child" | "stop" | "events">;
  const events: PeerEvent[] = [];
  lines.on("line", (line) => events.push(JSON.parse(line) as PeerEvent));
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  return {
    ...info,
    child,
    events,
    async stop() {
      child.stdin!.end();
      const timer = setTimeout(() => child.kill("SIGKILL"), 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
