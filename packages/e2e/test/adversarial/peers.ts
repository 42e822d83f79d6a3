/**
 * What the adversarial suite plays against: a real listener in a process
 * of its own (victim.mjs), a bystander process with a secret in memory
 * (bystander.mjs), and the hand-made handshakes and channels of a hostile
 * peer.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { protocol, onTheWire } from "@tensorpipe/core/testing";
import { type ChannelEntries, RawSocket, brochureByHand } from "../raw-socket.js";

/** A line the victim printed. */
export interface VictimEvent {
  event: string;
  code?: string;
  errnoName?: string;
  message?: string;
  rss?: number;
  /** CPU time so far, user and system, in ms. */
  cpu?: number;
  /** Tensors of a message it took a read for. */
  tensors?: number;
  /** Verdicts a pipe's path report keeps, and their characters. */
  verdicts?: number;
  chars?: number;
  /** The path report as describePathReport() tells it. */
  text?: string;
  /** A failed pipe's flight record, as describeFlightEvents() tells it. */
  record?: string;
  urls?: string[];
  pid?: number;
}

/** Lines of JSON from a child's stdout, and a way to wait for one. */
class JsonLines<T> {
  readonly lines: T[] = [];
  private waiters: (() => void)[] = [];

  constructor(child: ChildProcess) {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      this.lines.push(JSON.parse(line) as T);
      for (const w of this.waiters.splice(0)) w();
    });
  }

  /** The first line (from `from` on) that `match` takes; throws after `ms`. */
  async next(match: (line: T) => boolean, ms = 15_000, from = 0): Promise<T> {
    const deadline = Date.now() + ms;
    for (;;) {
      const found = this.lines.slice(from).find(match);
      if (found) return found;
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no matching line within ${ms} ms; got ${JSON.stringify(this.lines.slice(-5))}`);
      await new Promise<void>((r) => {
        const timer = setTimeout(r, left);
        this.waiters.push(() => {
          clearTimeout(timer);
          r();
        });
      });
    }
  }
}

const script = (name: string) => fileURLToPath(new URL(name, import.meta.url));

/** Starts `node args...`, under `ulimit -n fdLimit` when given; with `env`, its stderr is the caller's to read. */
function node(args: string[], fdLimit?: number, env?: NodeJS.ProcessEnv): ChildProcess {
  const argv = ["--expose-gc", ...args];
  const options = { stdio: ["pipe", "pipe", env ? "pipe" : "inherit"] as ("pipe" | "inherit")[], env: { ...process.env, ...env } };
  return fdLimit === undefined
    ? spawn(process.execPath, argv, options)
    : spawn("bash", ["-c", `ulimit -n ${fdLimit} && exec "$0" "$@"`, process.execPath, ...argv], options);
}

/** The victim: a real listener (uv and shm, basic and cma) in its own process. */
export class Victim {
  /** What it wrote on stderr, when started with an env of its own (NODE_DEBUG's lines). */
  stderr = "";

  private constructor(
    readonly child: ChildProcess,
    private readonly out: JsonLines<VictimEvent>,
    readonly uvUrl: string,
    readonly shmUrl: string,
    readonly pid: number,
  ) {
    child.stderr?.on("data", (d: Buffer) => (this.stderr += d.toString()));
  }

  static async start(options: object = {}, fdLimit?: number, env?: NodeJS.ProcessEnv): Promise<Victim> {
    const child = node([script("victim.mjs"), JSON.stringify(options)], fdLimit, env);
    const out = new JsonLines<VictimEvent>(child);
    const ready = await out.next((l) => l.event === "listening");
    const urls = ready.urls!;
    return new Victim(child, out, urls.find((u) => u.startsWith("uv://"))!, urls.find((u) => u.startsWith("shm://"))!, ready.pid!);
  }

  get port(): number {
    return Number(this.uvUrl.split(":").at(-1));
  }

  get events(): readonly VictimEvent[] {
    return this.out.lines;
  }

  /** The next event (counted from `from`) that `match` takes. */
  next(match: (e: VictimEvent) => boolean, ms?: number, from = 0): Promise<VictimEvent> {
    return this.out.next(match, ms, from);
  }

  /** Its resident memory after a full GC. */
  async rss(): Promise<number> {
    const from = this.out.lines.length;
    this.child.stdin!.write("rss\n");
    return (await this.out.next((l) => l.event === "rss", 15_000, from)).rss!;
  }

  /** Its CPU time so far, user and system (ms). */
  async cpu(): Promise<number> {
    const from = this.out.lines.length;
    this.child.stdin!.write("cpu\n");
    return (await this.out.next((l) => l.event === "cpu", 15_000, from)).cpu!;
  }

  async stop(): Promise<void> {
    const exited = new Promise<void>((r) => (this.child.exitCode !== null ? r() : this.child.once("exit", () => r())));
    this.child.stdin!.end();
    const timer = setTimeout(() => this.child.kill("SIGKILL"), 5000);
    await exited;
    clearTimeout(timer);
  }
}

/** Where the bystander keeps its secret. */
export interface Secret {
  pid: number;
  address: bigint;
  length: number;
  child: ChildProcess;
}

export async function startBystander(): Promise<Secret> {
  const child = node([script("bystander.mjs")]);
  const line = await new JsonLines<{ pid: number; address: string; length: number }>(child).next(() => true);
  return { pid: line.pid, address: BigInt(line.address), length: line.length, child };
}

/** A pipe over uv + basic opened by hand, frame by frame, as a foreign peer would. */
export async function rawPipe(
  port: number,
  onIds?: (ids: bigint[]) => void,
  extra?: ChannelEntries,
): Promise<{ main: RawSocket; reply: RawSocket; channel: RawSocket }> {
  const { main, answer } = await brochureByHand(port, extra);
  onIds?.([...answer.transportRegistrationIds.values(), ...[...answer.channelRegistrationIds.values()].flat()]);
  const requested = async (id: bigint) => {
    const s = await RawSocket.connect(port);
    s.write(onTheWire([protocol.encodePacket({ kind: "requested", registrationId: id })]));
    return s;
  };
  const reply = await requested(answer.transportRegistrationIds.get(protocol.ConnectionKind.REPLY)!);
  const channel = await requested(answer.channelRegistrationIds.get("basic")![0]!);
  return { main, reply, channel };
}

export { ForgedCmaContext } from "./forged-cma.mjs";
