/**
 * The machine's limit for the exchange a transport does: the small C
 * programs the transport packages build beside their addons
 * (native/baseline), run as two processes with no Node between them.
 * "shm ring (C)" moves frames over the shm transport's own rings and
 * wake-ups; "TCP (C)" over one loopback TCP connection.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { packageRoot } from "./backends.js";

const run = promisify(execFile);

/** A C program built beside a transport's addon. */
export interface CBaselineSpec {
  /** The series it stands for in `tensorpipe bench` ("shm ring (C)"). */
  name: string;
  /** The package that builds it. */
  packageName: string;
  /** Its file name under the package's build/Release. */
  program: string;
}

/** The programs `tensorpipe bench` holds the transports against. */
export const C_BASELINES: readonly CBaselineSpec[] = [
  { name: "shm ring (C)", packageName: "@tensorpipe/transport-shm", program: "shm_ring_baseline" },
  { name: "TCP (C)", packageName: "@tensorpipe/transport-uv", program: "tcp_baseline" },
];

/** What a C program's round trips report. */
export interface CRoundTrips {
  /** Each round trip, in microseconds. */
  us: number[];
  /** The two cores its processes were pinned to; empty where this process may use only one. */
  cores: number[];
}

/** One of those programs, found where its package built it. */
export class CBaseline {
  private constructor(
    /** The series it stands for. */
    readonly name: string,
    /** The program. */
    readonly path: string,
  ) {}

  /** The program built in the package's tree, or why there is none. */
  static find(spec: CBaselineSpec): CBaseline | {
    /** Why there is none. */
    missing: string;
  } {
    const root = packageRoot(spec.packageName);
    if (!root) return { missing: `${spec.packageName} is not installed` };
    const path = join(root, "build", "Release", spec.program);
    if (!existsSync(path)) return { missing: `${spec.program} is built only from source (${path} is missing)` };
    return new CBaseline(spec.name, path);
  }

  /**
   * Round trips of `size`-byte frames, in microseconds, and the two cores
   * the processes were pinned to (none where this process may use one).
   */
  async roundTrips(size: number, n: number): Promise<CRoundTrips> {
    return (await this.exec("pingpong", size, n)) as CRoundTrips;
  }

  /** GB/s of `count` frames of `size` bytes one way, the last acknowledged. */
  async throughput(size: number, count: number): Promise<number> {
    return (await this.exec("stream", size, count) as { gbps: number }).gbps;
  }

  private async exec(mode: string, size: number, count: number): Promise<unknown> {
    const { stdout } = await run(this.path, [mode, String(size), String(count)], { maxBuffer: 64 * 1024 * 1024, timeout: 120_000 });
    return JSON.parse(stdout);
  }
}
