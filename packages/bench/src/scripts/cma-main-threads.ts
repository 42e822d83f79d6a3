/**
 * Large tensors over shm+cma to the bench's peer, in turns alternating with
 * "cma (C)" (the same copy with no Node between): GB/s of both, and what
 * each process's main thread spends per message beside the copier threads
 * (CPU and context switches). On a machine whose cores the copiers fill,
 * that time is taken from them: it is the library's part of the gap to the
 * C program.
 *
 *   node packages/bench/dist/scripts/cma-main-threads.js [--sizes 16MiB,64MiB] [--seconds 3] [--json]
 */
import { readFileSync } from "node:fs";
import { CPU_DEVICE } from "@tensorpipe/core";
import { CBaseline, C_SERIES, fmt, median, parseSize, sinkThroughput, sizeLabel } from "../index.js";
import { printResults, scriptArgs, withShmPeer } from "./script.js";

/** One size's figures, medians over the turns. */
export interface MainThreadsResult {
  size: number;
  /** Messages timed over shm+cma. */
  messages: number;
  /** GB/s of shm+cma, and of cma (C) in the turns between. */
  gbps: number;
  cGbps: number;
  /** Main-thread CPU per message, microseconds, of this process (the sender) and of the peer (the reader). */
  senderCpu: number;
  readerCpu: number;
  /** Context switches per message of the same threads. */
  senderSwitches: number;
  readerSwitches: number;
}

/** A main thread's CPU time (nanoseconds, schedstat) and context switches. */
interface MainThread {
  ns: number;
  switches: number;
}

/** What the main thread of `pid` has spent so far. */
function mainThread(pid: number): MainThread {
  const ns = Number(readFileSync(`/proc/${pid}/task/${pid}/schedstat`, "utf8").split(" ")[0]);
  const status = readFileSync(`/proc/${pid}/task/${pid}/status`, "utf8");
  const count = (name: string) => Number(new RegExp(`^${name}:\\s+(\\d+)`, "m").exec(status)![1]);
  return { ns, switches: count("voluntary_ctxt_switches") + count("nonvoluntary_ctxt_switches") };
}

/** Adds to `total` what a main thread spent from `before` to `after`. */
function addSince(total: MainThread, before: MainThread, after: MainThread): void {
  total.ns += after.ns - before.ns;
  total.switches += after.switches - before.switches;
}

export async function cmaMainThreads(sizes: readonly number[], seconds: number): Promise<MainThreadsResult[]> {
  const c = CBaseline.named(C_SERIES.cma);
  if ("missing" in c) throw new Error(c.missing);
  return withShmPeer({ channels: ["cma"] }, async (pipe, peer) => {
    const results: MainThreadsResult[] = [];
    if (pipe.channelFor(CPU_DEVICE, CPU_DEVICE) !== "cma") throw new Error("the pipe did not negotiate cma");
    for (const size of sizes) {
      const data = new Uint8Array(size).fill(1);
      // A turn of about 384 MiB, as the bench's 64 MiB turns; the first ones
      // untimed (cma makes the buffers huge pages over its first transfers).
      const batch = Math.max(2, Math.ceil((384 * 2 ** 20) / size));
      for (let i = 0; i < 3; i++) await sinkThroughput(pipe, data, batch);
      const gbps: number[] = [];
      const cGbps: number[] = [];
      let messages = 0;
      // Counted over the shm+cma turns only: cma (C) runs in between.
      const sender = { ns: 0, switches: 0 };
      const reader = { ns: 0, switches: 0 };
      const t0 = performance.now();
      while (gbps.length < 2 || performance.now() - t0 < seconds * 1000) {
        const before = [mainThread(process.pid), mainThread(peer.pid)] as const;
        gbps.push(await sinkThroughput(pipe, data, batch));
        addSince(sender, before[0], mainThread(process.pid));
        addSince(reader, before[1], mainThread(peer.pid));
        messages += batch;
        cGbps.push(await c.throughput(size, batch));
      }
      results.push({
        size,
        messages,
        gbps: median(gbps),
        cGbps: median(cGbps),
        senderCpu: sender.ns / messages / 1000,
        readerCpu: reader.ns / messages / 1000,
        senderSwitches: sender.switches / messages,
        readerSwitches: reader.switches / messages,
      });
    }
    return results;
  });
}

const args = scriptArgs(import.meta.url);
if (args) {
  const sizes = args.value("--sizes", "16MiB,64MiB").split(",").map(parseSize);
  const results = await cmaMainThreads(sizes, Number(args.value("--seconds", "3")));
  printResults(args, "shm+cma against cma (C), turn by turn; main threads per message (CPU in microseconds)", results, [
    { header: "size", width: 8, left: true, cell: (r) => sizeLabel(r.size) },
    { header: "messages", width: 9, cell: (r) => String(r.messages) },
    { header: "GB/s", width: 8, cell: (r) => fmt(r.gbps, 2) },
    { header: "C GB/s", width: 8, cell: (r) => fmt(r.cGbps, 2) },
    { header: "sender CPU", width: 12, cell: (r) => fmt(r.senderCpu, 0) },
    { header: "reader CPU", width: 12, cell: (r) => fmt(r.readerCpu, 0) },
    { header: "sender sw", width: 11, cell: (r) => fmt(r.senderSwitches, 2) },
    { header: "reader sw", width: 11, cell: (r) => fmt(r.readerSwitches, 2) },
  ]);
}
