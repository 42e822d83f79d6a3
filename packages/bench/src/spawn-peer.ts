import { type ChildProcess, spawn } from "node:child_process";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";

/** A line the peer printed: a pipe that ended, and why. */
export interface PeerEvent {
  /** What happened ("pipe-ended", ...). */
  event: string;
  /** The error's code. */
  code?: string;
  /** The error's message. */
  message?: string;
}

/** The peer process (`tensorpipe peer`) and where it listens. */
export interface PeerProcess {
  /** The uv URL; the listener offers its other transports in negotiation. */
  url: string;
  /** Every URL it listens on, one per transport. */
  urls: string[];
  /** The node:net echo server's port. */
  echoPort: number;
  /** The node:net sink server's port. */
  sinkPort: number;
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

/** A child process that prints what it is as its first line of JSON, then events, and ends when its stdin closes. */
export interface JsonChild<Info> {
  /** What it printed first. */
  info: Info;
  /** The child process. */
  child: ChildProcess;
  /** The lines it printed after the first, parsed. */
  events: PeerEvent[];
  /** Ends it (closing its stdin), killing it after 5 s. */
  stop(): Promise<void>;
}

/** Starts `node ...args` (in a network namespace when told) and waits for its first line. */
export async function spawnJsonChild<Info>(args: readonly string[], options: SpawnOptions = {}): Promise<JsonChild<Info>> {
  // TP_PEER_NODE_ARGS="--cpu-prof": extra node flags for the child, to profile it.
  const nodeArgs = (process.env.TP_PEER_NODE_ARGS ?? "").split(" ").filter(Boolean);
  const argv = [...nodeArgs, ...args];
  return options.netns ? jsonChild(["ip", "netns", "exec", options.netns, process.execPath, ...argv]) : jsonChild([process.execPath, ...argv]);
}

/** Starts `command` and waits for its first line of JSON. */
export async function jsonChild<Info>([command, ...args]: readonly string[]): Promise<JsonChild<Info>> {
  const child = spawn(command!, args, { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout! });
  const first = await new Promise<string>((resolve, reject) => {
    lines.once("line", resolve);
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`${[command, ...args].join(" ")} exited with ${code} before saying where it is`)));
  });
  const events: PeerEvent[] = [];
  lines.on("line", (line) => events.push(JSON.parse(line) as PeerEvent));
  const exited = new Promise<void>((r) => (child.exitCode !== null || child.signalCode !== null ? r() : child.once("exit", () => r())));
  return {
    info: JSON.parse(first) as Info,
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

/** The `tensorpipe` command of @tensorpipe/cli, as installed beside this package. */
const TENSORPIPE = join(dirname(createRequire(import.meta.url).resolve("@tensorpipe/cli/package.json")), "dist", "main.js");

/** Starts `tensorpipe peer` on `host` in a child process and waits for its addresses (extraArgs: its other flags). */
export async function spawnPeer(host = "127.0.0.1", extraArgs: readonly string[] = [], options: SpawnOptions = {}): Promise<PeerProcess> {
  const { info, child, events, stop } = await spawnJsonChild<Omit<PeerProcess, "child" | "stop" | "events">>(
    [TENSORPIPE, "peer", "--host", host, ...extraArgs],
    options,
  );
  return { ...info, child, events, stop };
}
