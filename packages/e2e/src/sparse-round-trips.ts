/**
 * README round trips (8 B tensor) over shm between two processes with a
 * pause between them, as a client with a request every few milliseconds
 * makes them: the round trip, and the CPU each end spends per message. A
 * read that polls its ring through the pauses spends the CPU and gains
 * nothing; the polling spells learnt from the waits (transport-shm's
 * PollingSpells) are what this shows.
 *
 *   node packages/e2e/dist/sparse-round-trips.js [--gaps 1,5] [--count 1000] [--json]
 */
import { readFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { createContext, fmt, percentile, readmeRoundTrip, spawnPeer } from "@tensorpipe/cli";

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
  const peer = await spawnPeer("127.0.0.1", ["--transports", "shm"]);
  const context = await createContext({ transports: ["shm"] });
  const results: SparseResult[] = [];
  try {
    const pipe = await context.connect(peer.urls.find((u) => u.startsWith("shm://"))!);
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
  } finally {
    await context.close();
    await peer.stop();
  }
  return results;
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const arg = (name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);
  const gaps = (arg("--gaps") ?? "1,5").split(",").map(Number);
  const results = await sparseRoundTrips(gaps, Number(arg("--count") ?? 1000));
  if (args.includes("--json")) console.log(JSON.stringify(results));
  else {
    console.log("README round trips over shm with a pause between them (microseconds)");
    console.log(`${"pause ms".padEnd(10)}${"count".padStart(7)}${"p50".padStart(9)}${"p90".padStart(9)}${"client CPU/msg".padStart(16)}${"peer CPU/msg".padStart(14)}`);
    for (const r of results) {
      console.log(
        `${String(r.gapMs).padEnd(10)}${String(r.count).padStart(7)}${fmt(r.p50).padStart(9)}${fmt(r.p90).padStart(9)}${fmt(r.clientCpu, 0).padStart(16)}${fmt(r.peerCpu, 0).padStart(14)}`,
      );
    }
  }
}
