/**
 * Real etcd servers for the tests (Debian's etcd-server, installed by
 * scripts/setup.sh): on 127.0.0.1 with free ports and a temporary data
 * directory, one node or a cluster of three.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";

/** Why etcd cannot run here, or undefined when it can (always under TP_REQUIRE_ETCD, as in CI: the tests then fail rather than skip). */
export function etcdMissing(): string | undefined {
  if (process.env.TP_REQUIRE_ETCD) return undefined;
  try {
    execFileSync("etcd", ["--version"], { stdio: "ignore" });
    return undefined;
  } catch {
    return "no etcd binary (bash scripts/setup.sh installs Debian's etcd-server)";
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** One etcd process of a cluster. */
export class EtcdNode {
  private child: ChildProcess | undefined;
  constructor(
    readonly name: string,
    readonly clientUrl: string,
    readonly peerUrl: string,
    private readonly dataDir: string,
    private readonly initialCluster: string,
  ) {}

  /** Starts (or restarts) the node; resolves once it answers. */
  async start(state: "new" | "existing" = "new"): Promise<void> {
    this.child = spawn(
      "etcd",
      [
        "--name",
        this.name,
        "--data-dir",
        this.dataDir,
        "--listen-client-urls",
        this.clientUrl,
        "--advertise-client-urls",
        this.clientUrl,
        "--listen-peer-urls",
        this.peerUrl,
        "--initial-advertise-peer-urls",
        this.peerUrl,
        "--initial-cluster",
        this.initialCluster,
        "--initial-cluster-state",
        state,
        "--initial-cluster-token",
        "tensorpipe-test",
        "--heartbeat-interval",
        "50",
        "--election-timeout",
        "500",
        "--log-level",
        "error",
        "--logger",
        "zap",
      ],
      { stdio: ["ignore", "ignore", "pipe"] },
    );
    let stderr = "";
    this.child.stderr!.on("data", (d: Buffer) => {
      stderr = (stderr + d.toString()).slice(-4000);
    });
    const exited = new Promise<never>((_, reject) => this.child!.once("exit", (code) => reject(new Error(`etcd ${this.name} exited with ${code}: ${stderr}`))));
    exited.catch(() => undefined);
    await Promise.race([this.ready(), exited]);
  }

  private async ready(): Promise<void> {
    const deadline = Date.now() + 20_000;
    for (;;) {
      try {
        const r = await fetch(`${this.clientUrl}/health`);
        if (r.ok) return;
      } catch {}
      if (Date.now() > deadline) throw new Error(`etcd ${this.name} did not answer at ${this.clientUrl} within 20 s`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /** Kills the node at once (a crash, not a shutdown). */
  async kill(): Promise<void> {
    const c = this.child;
    this.child = undefined;
    if (!c || c.exitCode !== null) return;
    const gone = new Promise((r) => c.once("exit", r));
    c.kill("SIGKILL");
    await gone;
  }
}

/** A cluster of `size` etcd nodes on `host` (127.0.0.1 by default). */
export class EtcdCluster {
  private constructor(
    readonly nodes: EtcdNode[],
    private readonly dir: string,
  ) {}

  static async start(size = 1, host = "127.0.0.1"): Promise<EtcdCluster> {
    const dir = mkdtempSync(join(tmpdir(), "tp-etcd-"));
    const ports = [];
    for (let i = 0; i < size; i++) ports.push({ client: await freePort(), peer: await freePort() });
    const initial = ports.map((p, i) => `n${i}=http://${host}:${p.peer}`).join(",");
    const nodes = ports.map((p, i) => new EtcdNode(`n${i}`, `http://${host}:${p.client}`, `http://${host}:${p.peer}`, join(dir, `n${i}`), initial));
    const cluster = new EtcdCluster(nodes, dir);
    try {
      await Promise.all(nodes.map((n) => n.start()));
    } catch (e) {
      await cluster.stop();
      throw e;
    }
    return cluster;
  }

  /** The client URLs of every node. */
  get hosts(): string[] {
    return this.nodes.map((n) => n.clientUrl);
  }

  async stop(): Promise<void> {
    await Promise.all(this.nodes.map((n) => n.kill()));
    rmSync(this.dir, { recursive: true, force: true });
  }
}
