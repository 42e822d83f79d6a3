/**
 * A server with many clients: N pipes (1, 10, 100, 1000) from this process
 * to the bench's peer process, over each transport, against N node:net
 * sockets to the peer's echo server in the same run. For each: how fast
 * the pipes open, what each idle pipe costs the peer (RSS, descriptors),
 * then every pipe doing round trips of 4 KiB and of 1 MiB at once (after
 * one round untimed, as the bench warms up), as the
 * code a user writes does them (write, readMessage): the round trips' p50
 * and p99, the aggregate throughput (both ways), and the system time per
 * message of both processes; and 1 MiB once more read into memory each
 * pipe reuses (readDescriptor, read), without readMessage's fresh buffer
 * per message. Ends with the targets of the scale series.
 *
 *   node packages/bench/dist/scripts/many-pipes.js [--counts 1,10,100,1000] [--transports shm,uv] [--channels cma,basic] [--json]
 */
import { readFileSync, readdirSync } from "node:fs";
import { type Socket, connect } from "node:net";
import type { Pipe } from "@tensorpipe/core";
import { createContext, fmt, percentile, spawnPeer } from "../index.js";
import { type ScriptArgs, printResults, scriptArgs } from "./script.js";

const KiB = 1024;
const MiB = 1024 * KiB;

/** Round trips of one size on every pipe at once. */
export interface Exchange {
  p50Us: number;
  p99Us: number;
  /** Bytes both ways over the wall time, GB/s. */
  gbps: number;
  /** System time of both processes per message (a round trip is two), us. */
  sysUsPerMessage: number;
}

export interface ScaleRow {
  /** "shm", "uv" or "node:net". */
  series: string;
  pipes: number;
  /** Pipes (or sockets) opened per second, all at once. */
  setupPerSecond: number;
  /** The peer's RSS growth per idle pipe, KiB. */
  idleKiBPerPipe: number;
  /** The peer's descriptors per idle pipe. */
  fdsPerPipe: number;
  small: Exchange;
  large: Exchange;
  /** 1 MiB read with readDescriptor() and read() into a buffer each pipe reuses (pipes only). */
  largeReused?: Exchange;
}

/** A process's RSS (KiB), descriptors and CPU times (us). */
function processState(pid: number | "self") {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
  const tick = 1e6 / 100;
  return {
    rssKiB: Number(/VmRSS:\s+(\d+)/.exec(status)![1]),
    fds: readdirSync(`/proc/${pid}/fd`).length,
    sysUs: Number(stat[12]) * tick,
  };
}

const settle = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** `rounds` round trips of `size` bytes on each end at once (a function doing one). */
async function exchange(ends: ((data: Uint8Array) => Promise<void>)[], size: number, rounds: number, peerPid: number): Promise<Exchange> {
  const data = new Uint8Array(size).fill(7);
  // Warm, as the bench is: the JIT, each end's buffers and rings paged in.
  await Promise.all(ends.map((roundTrip) => roundTrip(data)));
  const samples: number[] = [];
  const before = [processState(peerPid), processState("self")];
  const t0 = performance.now();
  await Promise.all(
    ends.map(async (roundTrip) => {
      for (let i = 0; i < rounds; i++) {
        const t = performance.now();
        await roundTrip(data);
        samples.push((performance.now() - t) * 1000);
      }
    }),
  );
  const wallS = (performance.now() - t0) / 1000;
  const after = [processState(peerPid), processState("self")];
  const sys = after[0]!.sysUs - before[0]!.sysUs + after[1]!.sysUs - before[1]!.sysUs;
  samples.sort((a, b) => a - b);
  const messages = 2 * ends.length * rounds;
  return { p50Us: percentile(samples, 50), p99Us: percentile(samples, 99), gbps: (messages * size) / wallS / 1e9, sysUsPerMessage: sys / messages };
}

const rounds = (pipes: number, size: number) => Math.max(2, Math.round((size === 4 * KiB ? 4000 : 400) / pipes));

/** One transport with `count` pipes to the peer. */
async function pipesRow(transport: string, channels: readonly string[] | undefined, count: number, peerUrl: string, peerPid: number): Promise<ScaleRow> {
  const context = await createContext({ transports: [transport], ...(channels ? { channels } : {}) });
  try {
    const before = processState(peerPid);
    const t0 = performance.now();
    const pipes: Pipe[] = await Promise.all(Array.from({ length: count }, () => context.connect(peerUrl)));
    const setupPerSecond = count / ((performance.now() - t0) / 1000);
    // The handshakes' garbage and the peer's accepting done.
    await settle(500);
    const idle = processState(peerPid);
    const ends = pipes.map((pipe) => async (data: Uint8Array) => {
      await pipe.write({ tensors: [{ buffer: data }] });
      await pipe.readMessage();
    });
    const small = await exchange(ends, 4 * KiB, rounds(count, 4 * KiB), peerPid);
    const large = await exchange(ends, MiB, rounds(count, MiB), peerPid);
    const reusing = pipes.map((pipe) => {
      const landing = new Uint8Array(MiB);
      return async (data: Uint8Array) => {
        await pipe.write({ tensors: [{ buffer: data }] });
        await pipe.readDescriptor();
        await pipe.read({ tensors: [{ buffer: landing }] });
      };
    });
    const largeReused = await exchange(reusing, MiB, rounds(count, MiB), peerPid);
    return {
      series: transport,
      pipes: count,
      setupPerSecond,
      idleKiBPerPipe: (idle.rssKiB - before.rssKiB) / count,
      fdsPerPipe: (idle.fds - before.fds) / count,
      small,
      large,
      largeReused,
    };
  } finally {
    await context.close();
  }
}

/** `count` node:net sockets to the peer's echo server. */
async function netRow(count: number, port: number, peerPid: number): Promise<ScaleRow> {
  const before = processState(peerPid);
  const t0 = performance.now();
  const sockets = await Promise.all(
    Array.from(
      { length: count },
      () =>
        new Promise<Socket>((resolve, reject) => {
          const s = connect(port, "127.0.0.1", () => resolve(s));
          s.setNoDelay(true);
          s.once("error", reject);
        }),
    ),
  );
  const setupPerSecond = count / ((performance.now() - t0) / 1000);
  await settle(500);
  const idle = processState(peerPid);
  const ends = sockets.map(
    (s) => (data: Uint8Array) =>
      new Promise<void>((resolve) => {
        let got = 0;
        const onData = (chunk: Buffer) => {
          got += chunk.length;
          if (got < data.length) return;
          s.off("data", onData);
          resolve();
        };
        s.on("data", onData);
        s.write(data);
      }),
  );
  try {
    const small = await exchange(ends, 4 * KiB, rounds(count, 4 * KiB), peerPid);
    const large = await exchange(ends, MiB, rounds(count, MiB), peerPid);
    return {
      series: "node:net",
      pipes: count,
      setupPerSecond,
      idleKiBPerPipe: (idle.rssKiB - before.rssKiB) / count,
      fdsPerPipe: (idle.fds - before.fds) / count,
      small,
      large,
    };
  } finally {
    sockets.forEach((s) => s.destroy());
  }
}

/** Every row: each transport and node:net at each count, with a fresh peer per row. */
export async function manyPipes(counts: readonly number[], transports: readonly string[], channels?: readonly string[]): Promise<ScaleRow[]> {
  const rows: ScaleRow[] = [];
  for (const count of counts) {
    for (const series of [...transports, "node:net"]) {
      const peer = await spawnPeer();
      try {
        const url = peer.urls.find((u) => u.startsWith(`${series}://`));
        if (series === "node:net") rows.push(await netRow(count, peer.echoPort, peer.pid));
        else if (url) rows.push(await pipesRow(series, channels, count, url, peer.pid));
      } finally {
        await peer.stop();
      }
    }
  }
  return rows;
}

/** The scale series' targets, each with whether this run met it. */
export function scaleTargets(rows: readonly ScaleRow[]): { target: string; value: string; met: boolean }[] {
  const row = (series: string, pipes: number) => rows.find((r) => r.series === series && r.pipes === pipes);
  const out: { target: string; value: string; met: boolean }[] = [];
  const top = Math.max(...rows.map((r) => r.pipes));
  const shmTop = row("shm", top);
  const uvTop = row("uv", top);
  const shm10 = row("shm", 10);
  for (const size of ["small", "large"] as const) {
    const label = size === "small" ? "4 KiB" : "1 MiB";
    if (shmTop && uvTop) {
      const r = shmTop[size].gbps / uvTop[size].gbps;
      out.push({ target: `${label}: shm GB/s at ${top} pipes >= uv's`, value: `${fmt(r, 2)}x`, met: r >= 1 });
    }
    if (shmTop && shm10) {
      const r = shmTop[size].gbps / shm10[size].gbps;
      out.push({ target: `${label}: shm GB/s at ${top} pipes >= 0.8x at 10`, value: `${fmt(r, 2)}x`, met: r >= 0.8 });
    }
  }
  if (shmTop?.largeReused && shm10?.largeReused) {
    const r = shmTop.largeReused.gbps / shm10.largeReused.gbps;
    out.push({ target: `1 MiB into reused buffers: shm GB/s at ${top} pipes >= 0.8x at 10`, value: `${fmt(r, 2)}x`, met: r >= 0.8 });
  }
  for (const series of ["shm", "uv"]) {
    const high = row(series, top);
    const ten = row(series, 10);
    if (high && ten) {
      const r = high.small.sysUsPerMessage / ten.small.sysUsPerMessage;
      out.push({ target: `${series}: system time per 4 KiB message at ${top} pipes <= 2x at 10`, value: `${fmt(r, 2)}x`, met: r <= 2 });
    }
    if (high) {
      out.push({ target: `${series}: setup >= 1000 pipes/s at ${top}`, value: fmt(high.setupPerSecond, 0), met: high.setupPerSecond >= 1000 });
      out.push({ target: `${series}: RSS <= 256 KiB per idle pipe at ${top}`, value: `${fmt(high.idleKiBPerPipe, 0)} KiB`, met: high.idleKiBPerPipe <= 256 });
      out.push({ target: `${series}: <= 6 descriptors per pipe side`, value: fmt(high.fdsPerPipe, 1), met: high.fdsPerPipe <= 6 });
    }
  }
  return out;
}

function print(args: ScriptArgs, rows: ScaleRow[]): void {
  printResults(args, "N pipes (or sockets) from one process to the peer process, each doing round trips at once", rows, [
    { header: "series", width: 10, left: true, cell: (r) => r.series },
    { header: "N", width: 6, cell: (r) => String(r.pipes) },
    { header: "setup/s", width: 9, cell: (r) => fmt(r.setupPerSecond, 0) },
    { header: "KiB/idle", width: 10, cell: (r) => fmt(r.idleKiBPerPipe, 0) },
    { header: "fds/pipe", width: 10, cell: (r) => fmt(r.fdsPerPipe, 1) },
    { header: "4K p50us", width: 10, cell: (r) => fmt(r.small.p50Us, 0) },
    { header: "4K p99us", width: 10, cell: (r) => fmt(r.small.p99Us, 0) },
    { header: "4K GB/s", width: 9, cell: (r) => fmt(r.small.gbps, 3) },
    { header: "4K sys us", width: 11, cell: (r) => fmt(r.small.sysUsPerMessage, 1) },
    { header: "1M p50ms", width: 10, cell: (r) => fmt(r.large.p50Us / 1000, 2) },
    { header: "1M p99ms", width: 10, cell: (r) => fmt(r.large.p99Us / 1000, 2) },
    { header: "1M GB/s", width: 9, cell: (r) => fmt(r.large.gbps, 3) },
    { header: "reused GB/s", width: 13, cell: (r) => (r.largeReused ? fmt(r.largeReused.gbps, 3) : "-") },
  ]);
  if (args.has("--json")) return;
  console.log("\ntargets (ratios from this run):");
  for (const t of scaleTargets(rows)) console.log(`  ${t.met ? "met    " : "NOT MET"}  ${t.target}: ${t.value}`);
}

const args = scriptArgs(import.meta.url);
if (args) {
  const counts = args.value("--counts", "1,10,100,1000").split(",").map(Number);
  const transports = args.value("--transports", "shm,uv").split(",");
  const channels = args.has("--channels") ? args.value("--channels", "").split(",") : undefined;
  print(args, await manyPipes(counts, transports, channels));
}
