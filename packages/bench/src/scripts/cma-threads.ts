/**
 * Whether cma's copy grows with the cores, and what holds it back, at one
 * size: for each number of threads, memcpy split over that many (the
 * bench's, between JS buffers, and memcpy (C), between buffers of huge
 * pages as cma's are), cma (C) (process_vm_readv on that many copier
 * threads, no Node) and shm+cma to a peer whose cma has that many copiers;
 * then shm+cma to a peer at cma's default, as users get it. Turns
 * alternate between them, round after round, and each figure is a median.
 * The best memcpy of either kind is the machine's limit. cma (C)'s best
 * against it is the kernel's part of the gap; shm+cma against cma (C) is
 * the library's; the default row shows whether the default number of
 * copiers leaves speed unused.
 *
 *   node packages/bench/dist/scripts/cma-threads.js [--size 64MiB] [--threads 1,2,4,8,16] [--rounds 3] [--json]
 */
import { execFile } from "node:child_process";
import { readFileSync, readdirSync } from "node:fs";
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { CPU_DEVICE, type Pipe } from "@tensorpipe/core";
import {
  CBaseline,
  C_SERIES,
  ParallelMemcpy,
  type PeerProcess,
  createContext,
  fmt,
  median,
  parseSize,
  sinkThroughput,
  sizeLabel,
  spawnPeer,
} from "../index.js";
import { scriptArgs } from "./script.js";

/** One number of threads: GB/s of each, medians over the rounds. */
export interface ThreadsRow {
  /** Threads asked for; undefined for the row of cma's default. */
  threads?: number;
  /** Copier threads the peer's cma ran (counted by name in /proc). */
  copiers: number;
  /** memcpy over `threads` threads, between JS buffers as the bench's (none on the default row). */
  memcpy?: number;
  /** memcpy (C) over `threads` threads, between buffers of huge pages (none on the default row). */
  memcpyC?: number;
  /** cma (C) on `threads` copier threads (none on the default row). */
  cmaC?: number;
  /** shm+cma. */
  shmCma: number;
}

/** What the script prints with --json. */
export interface CmaThreadsResult {
  size: number;
  rounds: number;
  /** The machine's cores as Node counts them (availableParallelism). */
  cores: number;
  rows: ThreadsRow[];
  /** Each series' best row against the best memcpy of either kind, and the default's. */
  ratios: {
    "cma (C) best / memcpy best": number;
    "shm+cma best / memcpy best": number;
    "shm+cma default / memcpy best": number;
    "shm+cma best / cma (C) best": number;
  };
}

/** The threads of `pid` named as cma names its copiers. */
function copiersOf(pid: number): number {
  let n = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    try {
      if (readFileSync(`/proc/${pid}/task/${task}/comm`, "utf8").trim() === "tp-cma-copier") n++;
    } catch {
      // The thread ended while listed.
    }
  }
  return n;
}

const MEMCPY_C = fileURLToPath(new URL("../../build/Release/memcpy_baseline", import.meta.url));

/** GB/s of memcpy (C): `count` copies of `size` bytes over `threads` threads. */
async function memcpyC(size: number, count: number, threads: number): Promise<number> {
  const { stdout } = await promisify(execFile)(MEMCPY_C, [String(size), String(count), String(threads)], { timeout: 120_000 });
  return (JSON.parse(stdout) as { gbps: number }).gbps;
}

/** The thread counts tried unless told: powers of two up to the cores, and the cores. */
function defaultThreads(cores: number): number[] {
  const counts = new Set<number>();
  for (let t = 1; t <= cores; t *= 2) counts.add(t);
  counts.add(cores);
  return [...counts].sort((a, b) => a - b);
}

export async function cmaThreads(size: number, threads: readonly number[], rounds: number): Promise<CmaThreadsResult> {
  const c = CBaseline.named(C_SERIES.cma);
  if ("missing" in c) throw new Error(c.missing);
  const copier = new ParallelMemcpy(Math.max(...threads));
  // One peer for each number of threads, and one at cma's default, all
  // open at once so that the turns can alternate.
  const peers: { threads?: number; peer: PeerProcess; pipe?: Pipe }[] = [];
  const context = await createContext({ transports: ["shm"], channels: ["cma"] });
  try {
    for (const t of [...threads, undefined]) {
      const peer = await spawnPeer("127.0.0.1", ["--transports", "shm", "--channels", "cma", ...(t === undefined ? [] : ["--copy-threads", String(t)])]);
      peers.push({ ...(t === undefined ? {} : { threads: t }), peer });
    }
    for (const p of peers) {
      p.pipe = await context.connect(p.peer.urls.find((u) => u.startsWith("shm://"))!);
      if (p.pipe.channelFor(CPU_DEVICE, CPU_DEVICE) !== "cma") throw new Error("the pipe did not negotiate cma");
    }
    const data = new Uint8Array(size).fill(1);
    // A turn of about 384 MiB, as the bench's 64 MiB turns; the first ones
    // untimed (cma makes the buffers huge pages over its first transfers).
    const batch = Math.max(2, Math.ceil((384 * 2 ** 20) / size));
    for (const p of peers) for (let i = 0; i < 3; i++) await sinkThroughput(p.pipe!, data, batch);
    // memcpy's destination is fresh too: its first copy faults every page in.
    await copier.throughputOn(1, data, 1);
    const figures = peers.map(() => ({ memcpy: [] as number[], memcpyC: [] as number[], cmaC: [] as number[], shmCma: [] as number[] }));
    for (let r = 0; r < rounds; r++) {
      for (const [i, p] of peers.entries()) {
        const f = figures[i]!;
        if (p.threads !== undefined) {
          f.memcpy.push(await copier.throughputOn(p.threads, data, batch));
          f.memcpyC.push(await memcpyC(size, batch, p.threads));
          f.cmaC.push(await c.throughput(size, batch, p.threads));
        }
        f.shmCma.push(await sinkThroughput(p.pipe!, data, batch));
      }
    }
    const rows: ThreadsRow[] = peers.map((p, i) => {
      const f = figures[i]!;
      const row: ThreadsRow = { copiers: copiersOf(p.peer.pid), shmCma: median(f.shmCma) };
      if (p.threads !== undefined) Object.assign(row, { threads: p.threads, memcpy: median(f.memcpy), memcpyC: median(f.memcpyC), cmaC: median(f.cmaC) });
      return row;
    });
    const best = (key: "memcpy" | "memcpyC" | "cmaC" | "shmCma") => Math.max(...rows.filter((r) => r.threads !== undefined).map((r) => r[key]!));
    const byDefault = rows.find((r) => r.threads === undefined)!.shmCma;
    const limit = Math.max(best("memcpy"), best("memcpyC"));
    return {
      size,
      rounds,
      cores: availableParallelism(),
      rows,
      ratios: {
        "cma (C) best / memcpy best": best("cmaC") / limit,
        "shm+cma best / memcpy best": best("shmCma") / limit,
        "shm+cma default / memcpy best": byDefault / limit,
        "shm+cma best / cma (C) best": best("shmCma") / best("cmaC"),
      },
    };
  } finally {
    await context.close();
    await Promise.all(peers.map((p) => p.peer.stop()));
    await copier.close();
  }
}

const args = scriptArgs(import.meta.url);
if (args) {
  const cores = availableParallelism();
  const threads = args.value("--threads", defaultThreads(cores).join(",")).split(",").map(Number);
  if (!threads.every((t) => Number.isInteger(t) && t >= 1 && t <= 64)) {
    console.error(`--threads: a list of integers from 1 to 64, got ${args.value("--threads", "")}`);
    process.exit(2);
  }
  const result = await cmaThreads(parseSize(args.value("--size", "64MiB")), threads, Number(args.value("--rounds", "3")));
  if (args.has("--json")) console.log(JSON.stringify(result));
  else {
    console.log(`cma by copier threads at ${sizeLabel(result.size)}, ${cores} cores, GB/s (medians of ${result.rounds} rounds)`);
    console.log(
      `${"threads".padEnd(9)}${"copiers".padStart(8)}${"memcpy".padStart(9)}${"memcpy (C)".padStart(12)}${"cma (C)".padStart(9)}${"shm+cma".padStart(9)}`,
    );
    for (const r of result.rows) {
      const cell = (v: number | undefined, width = 9) => (v === undefined ? "" : fmt(v, 2)).padStart(width);
      console.log(
        `${(r.threads === undefined ? "default" : String(r.threads)).padEnd(9)}${String(r.copiers).padStart(8)}${cell(r.memcpy)}${cell(r.memcpyC, 12)}${cell(r.cmaC)}${cell(r.shmCma)}`,
      );
    }
    for (const [k, v] of Object.entries(result.ratios)) console.log(`  ${k.padEnd(32)} ${fmt(v, 2)}x`);
  }
}
