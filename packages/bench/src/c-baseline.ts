/**
 * The machine's limit for the exchange a backend does: the small C
 * programs this package builds (native/), run as two processes with no
 * Node between them.
 * "shm ring (C)" moves frames over the shm transport's own rings and
 * wake-ups; "TCP (C)" over one loopback TCP connection; "cma (C)" copies
 * them with process_vm_readv on copier threads, as the cma channel does.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type { ProbedBackend } from "./context.js";

const run = promisify(execFile);

/** One of the C programs. */
export interface CBaselineSpec {
  /** The series it stands for in `tensorpipe bench` ("shm ring (C)"). */
  name: string;
  /** The backend whose exchange it does: where that one is not viable, neither is the program. */
  backend: string;
  /** Its file name under build/Release. */
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
  { name: C_SERIES.shmRing, backend: "shm", program: "shm_ring_baseline", roundTrips: true },
  { name: C_SERIES.tcp, backend: "uv", program: "tcp_baseline", roundTrips: true },
  // Streams only: cma sends small tensors inline, through the transport.
  { name: C_SERIES.cma, backend: "cma", program: "cma_baseline", roundTrips: false },
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
export function findCBaselines(backends: readonly ProbedBackend[], specs: readonly CBaselineSpec[] = C_BASELINES): CBaselinesHere {
  const found: CBaseline[] = [];
  const skipped: CBaselinesHere["skipped"] = [];
  for (const spec of specs) {
    const backend = backends.find((b) => b.descriptor.name === spec.backend);
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

/** One of those programs, as built. */
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

  /** The program as built, or why there is none. */
  static find(spec: CBaselineSpec):
    | CBaseline
    | {
        /** Why there is none. */
        missing: string;
      } {
    // From src/ (under vitest) and from dist/ alike.
    const path = fileURLToPath(new URL(`../build/Release/${spec.program}`, import.meta.url));
    if (!existsSync(path)) return { missing: `${spec.program} is not built (${path} is missing: pnpm build)` };
    return new CBaseline(spec, path);
  }

  /** The program of the series `name` (one of C_SERIES), or why there is none. */
  static named(name: string):
    | CBaseline
    | {
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

  /**
   * GB/s of `count` frames of `size` bytes one way, the last acknowledged
   * (`threads`: cma (C)'s copier threads, where not its default).
   */
  async throughput(size: number, count: number, threads?: number): Promise<number> {
    return ((await this.exec("stream", size, count, threads === undefined ? [] : [String(threads)])) as { gbps: number }).gbps;
  }

  private async exec(mode: string, size: number, count: number, rest: readonly string[] = []): Promise<unknown> {
    const { stdout } = await run(this.path, [mode, String(size), String(count), ...rest], { maxBuffer: 64 * 1024 * 1024, timeout: 120_000 });
    return JSON.parse(stdout);
  }
}
