/** A member in a process of its own (fixtures/member.mjs), optionally in a network namespace. */
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const FIXTURE = fileURLToPath(new URL("fixtures/member.mjs", import.meta.url));

export interface MemberEvent {
  event: string;
  [key: string]: unknown;
}

export class MemberProcess {
  readonly events: MemberEvent[] = [];
  private constructor(private readonly child: ChildProcess) {}

  /** Starts `node member.mjs ...args`, in `netns` where given; resolves once it joined. */
  static async start(args: string[], netns?: string): Promise<MemberProcess> {
    const argv = [process.execPath, FIXTURE, ...args];
    const child = netns
      ? spawn("ip", ["netns", "exec", netns, ...argv], { stdio: ["pipe", "pipe", "pipe"] })
      : spawn(argv[0]!, argv.slice(1), { stdio: ["pipe", "pipe", "pipe"] });
    const m = new MemberProcess(child);
    let stderr = "";
    child.stderr!.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    createInterface({ input: child.stdout! }).on("line", (line) => {
      try {
        m.events.push(JSON.parse(line));
      } catch {}
    });
    const deadline = Date.now() + 20_000;
    while (!m.events.some((e) => e.event === "ready")) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`member ${args[0]} did not join: ${stderr}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    return m;
  }

  get pid(): number {
    return this.child.pid!;
  }

  /** Kills it at once: a crash. */
  async kill(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const gone = new Promise((r) => this.child.once("exit", r));
    this.child.kill("SIGKILL");
    await gone;
  }

  /** Ends its stdin: it leaves and exits. */
  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const gone = new Promise((r) => this.child.once("exit", r));
    this.child.stdin!.end();
    await Promise.race([gone, new Promise((r) => setTimeout(r, 5000))]);
    await this.kill();
  }
}
