/**
 * The machine's limit for the exchange a backend does: the small C
 * programs the backend packages build beside their addons
 * (native/baseline), run as two processes with no Node between them.
 * "shm ring (C)" moves frames over the shm transport's own rings and
 * wake-ups; "TCP (C)" over one loopback TCP connection; "cma (C)" copies
 * them with process_vm_readv on copier threads, as the cma channel does.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { type FoundBackend, packageRoot } from "./backends.js";

const run = promisify(execFile);

/** A C program built beside a backend's addon. */
export interface CBaselineSpec {
  /** The series it stands for in `tensorpipe bench` ("shm ring (C)"). */
  name: string;
  /** The backend whose exchange it does: where that one is not viable, neither is the program. */
  backend: string;
  /** The package that builds it. */
  packageName: string;
  /** Its file name under the package's build/Release. */
  program: string;
  /** Whether it times round trips too, or streams only. */
  roundTrips: boolean;
}

/** The series names of those programs in `tensorpipe bench`, for the ratios and scripts that pick one out. */
export const C_SERIES = {
  /** Frames over the shm transport's rings and wake-ups. */
  shmRing: "shm ring (C)",
  /** Frames over one loopback TCP connection. */
  tcp: "TCP (C)",
  /** cma's copy: process_vm_readv on copier threads. */
  cma: "cma (C)",
} as const;

/** The programs `tensorpipe bench` holds the backends against. */
export const C_BASELINES: readonly CBaselineSpec[] = [
  { name: C_SERIES.shmRing, backend: "shm", packageName: "@tensorpipe/transport-shm", program: "shm_ring_baseline", roundTrips: true },
  { name: C_SERIES.tcp, backend: "uv", packageName: "@tensorpipe/transport-uv", program: "tcp_baseline", roundTrips: true },
  // Streams only: cma sends small tensors inline, through the transport.
  { name: C_SERIES.cma, backend: "cma", packageName: "@tensorpipe/channel-cma", program: "cma_baseline", roundTrips: false },
];

/** What findCBaselines found. */
export interface CBaselinesHere {
  /** The programs that can run here. */
  found: CBaseline[];
  /** The others. */
  skipped: {
    /** The series it stands for. */
    name: string;
    /** Why it cannot run here. */
    reason: string;
  }[];
}

/**
 * The programs that can run here, each found where its package built it;
 * the others with why not (among them those whose backend, as `backends`
 * found it, is not viable here: the C program would fail the same way).
 */
export function findCBaselines(backends: readonly FoundBackend[], specs: readonly CBaselineSpec[] = C_BASELINES): CBaselinesHere {
  const found: CBaseline[] = [];
  const skipped: CBaselinesHere["skipped"] = [];
  for (const spec of specs) {
    const backend = backends.find((b) => b.spec.name === spec.backend);
    const baseline = CBaseline.find(spec);
    if (backend && !backend.viability.viable) skipped.push({ name: spec.name, reason: `${spec.backend} is not viable here: ${backend.viability.reason}` });
    else if ("missing" in baseline) skipped.push({ name: spec.name, reason: baseline.missing });
    else found.push(baseline);
  }
  return { found, skipped };
}

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
    /** What it is. */
    readonly spec: CBaselineSpec,
    /** The program. */
    readonly path: string,
  ) {}

  /** The series it stands for. */
  get name(): string {
    return this.spec.name;
  }

  /** The program built in the package's tree, or why there is none. */
  static find(spec: CBaselineSpec): CBaseline | {
    /** Why there is none. */
    missing: string;
  } {
    const root = packageRoot(spec.packageName);
    if (!root) return { missing: `${spec.packageName} is not installed` };
    const path = join(root, "build", "Release", spec.program);
    if (!existsSync(path)) return { missing: `${spec.program} is built only from source (${path} is missing)` };
    return new CBaseline(spec, path);
  }

  /** The program of the series `name` (one of C_SERIES), or why there is none. */
  static named(name: string): CBaseline | {
    /** Why there is none. */
    missing: string;
  } {
    const spec = C_BASELINES.find((s) => s.name === name);
    return spec ? CBaseline.find(spec) : { missing: `no C program stands for "${name}"` };
  }

  /**
   * Round trips of `size`-byte frames, in microseconds, and the two cores
   * the processes were pinned to (none where this process may use one).
   */
  async roundTrips(size: number, n: number): Promise<CRoundTrips> {
    if (!this.spec.roundTrips) throw new Error(`${this.spec.program} streams only`);
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
