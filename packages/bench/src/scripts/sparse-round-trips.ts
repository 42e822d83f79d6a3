/**
 * README round trips (8 B tensor) over shm between two processes with a
 * pause between them, as a client with a request every few milliseconds
 * makes them: the round trip, and the CPU each end spends per message. A
 * read that polls its ring through the pauses spends the CPU and gains
 * nothing; the polling spells learnt from the waits (transport-shm's
 * PollingSpells) are what this shows.
 *
 *   node packages/bench/dist/scripts/sparse-round-trips.js [--gaps 1,5] [--count 1000] [--json]
 */
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { fmt, percentile, readmeRoundTrip } from "../index.js";
import { printResults, scriptArgs, withShmPeer } from "./script.js";

/** Round trips with one pause between them. */
export interface SparseResult {
  /** The pause, milliseconds. */
  gapMs: number;
  count: number;
  /** Round trip, microseconds. */
  p50: number;
  p90: number;
  /** CPU per message, microseconds, of this process and of the peer. */
  clientCpu: number;
  peerCpu: number;
}

/** User and system time of a process so far, microseconds (clock ticks of 10 ms). */
function cpuOf(pid: number): number {
  const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

export async function sparseRoundTrips(gapsMs: readonly number[], count: number): Promise<SparseResult[]> {
  return withShmPeer({}, async (pipe, peer) => {
    const results: SparseResult[] = [];
    const data = new Uint8Array(8).fill(1);
    const back = new Uint8Array(8);
    for (const gapMs of gapsMs) {
      // Untimed: the spells learn the pauses.
      for (let i = 0; i < 100; i++) {
        await readmeRoundTrip(pipe, data, back);
        await sleep(gapMs);
      }
      const us: number[] = [];
      const client = process.cpuUsage();
      const peerBefore = cpuOf(peer.pid);
      for (let i = 0; i < count; i++) {
        const t0 = performance.now();
        await readmeRoundTrip(pipe, data, back);
        us.push((performance.now() - t0) * 1000);
        await sleep(gapMs);
      }
      const spent = process.cpuUsage(client);
      us.sort((a, b) => a - b);
      results.push({
        gapMs,
        count,
        p50: percentile(us, 50),
        p90: percentile(us, 90),
        clientCpu: (spent.user + spent.system) / count,
        peerCpu: (cpuOf(peer.pid) - peerBefore) / count,
      });
    }
    return results;
  });
}

const args = scriptArgs(import.meta.url);
if (args) {
  const gaps = args.value("--gaps", "1,5").split(",").map(Number);
  printResults(
    args,
    "README round trips over shm with a pause between them (microseconds)",
    await sparseRoundTrips(gaps, Number(args.value("--count", "1000"))),
    [
      { header: "pause ms", width: 10, left: true, cell: (r) => String(r.gapMs) },
      { header: "count", width: 7, cell: (r) => String(r.count) },
      { header: "p50", width: 9, cell: (r) => fmt(r.p50) },
      { header: "p90", width: 9, cell: (r) => fmt(r.p90) },
      { header: "client CPU/msg", width: 16, cell: (r) => fmt(r.clientCpu, 0) },
      { header: "peer CPU/msg", width: 14, cell: (r) => fmt(r.peerCpu, 0) },
    ],
  );
}
