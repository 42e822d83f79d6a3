/**
 * What the flight recorder costs: 8 B round trips (the README's loop) over
 * pipes whose contexts record (ContextOptions.flightRecorder, the default
 * 64 events) against pipes whose contexts do not (0), both ends of each in
 * this process with an echo on the far end, in alternating blocks so that
 * the machine's drift falls on both alike. Target: under 2% (on/off <= 1.02).
 *
 * `--control` records on both (64 against 64): the ratio the setup alone
 * gives, the floor under which no difference can be read.
 *
 *   node packages/bench/dist/scripts/recorder-cost.js [--blocks 10] [--trips 2000] [--control] [--json]
 */
import type { Pipe } from "@tensorpipe/core";
import { createContext, fmt, readmeRoundTrips, summarize } from "../index.js";
import { printResults, scriptArgs } from "./script.js";

/** One pair's figures: microseconds per round trip with and without the recorder. */
export interface RecorderCost {
  pair: string;
  onP50: number;
  offP50: number;
  onMean: number;
  offMean: number;
  /** On over off, by p50 and by mean (target <= 1.02). */
  p50Ratio: number;
  meanRatio: number;
}

/** Echoes every message back, into memory it reuses, until the pipe ends. */
async function echo(pipe: Pipe): Promise<void> {
  const back = new Uint8Array(8);
  try {
    for (;;) {
      const d = await pipe.readDescriptor();
      await pipe.read({ payloads: [], tensors: [{ buffer: back.subarray(0, d.tensors[0]!.length) }] });
      await pipe.write({ tensors: [{ buffer: back.subarray(0, d.tensors[0]!.length) }] });
    }
  } catch {
    // The pipe ended: the run is over.
  }
}

async function pipeWith(transport: string, channel: string, flightRecorder: number) {
  const server = await createContext({ transports: [transport], channels: [channel], flightRecorder });
  const client = await createContext({ transports: [transport], channels: [channel], flightRecorder });
  const l = await server.listen(transport === "shm" ? "shm://" : "uv://127.0.0.1:0");
  const [pipe, far] = await Promise.all([client.connect(l.addresses()[0]!), l.accept()]);
  void echo(far);
  return {
    pipe,
    close: async () => {
      pipe.close();
      await client.close();
      await server.close();
    },
  };
}

export async function recorderCost(transport: string, channel: string, blocks: number, trips: number, control = false): Promise<RecorderCost> {
  const on = await pipeWith(transport, channel, 64);
  const off = await pipeWith(transport, channel, control ? 64 : 0);
  const data = new Uint8Array(8);
  const back = new Uint8Array(8);
  const samples = { on: [] as number[], off: [] as number[] };
  try {
    await readmeRoundTrips(on.pipe, data, back, trips);
    await readmeRoundTrips(off.pipe, data, back, trips);
    for (let b = 0; b < blocks; b++) {
      // Which goes first alternates too.
      const order = b % 2 === 0 ? (["on", "off"] as const) : (["off", "on"] as const);
      for (const which of order) samples[which].push(...(await readmeRoundTrips((which === "on" ? on : off).pipe, data, back, trips)));
    }
  } finally {
    await on.close();
    await off.close();
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const onP50 = summarize(samples.on).p50;
  const offP50 = summarize(samples.off).p50;
  return {
    pair: `${transport}+${channel}`,
    onP50,
    offP50,
    onMean: mean(samples.on),
    offMean: mean(samples.off),
    p50Ratio: onP50 / offP50,
    meanRatio: mean(samples.on) / mean(samples.off),
  };
}

const args = scriptArgs(import.meta.url);
if (args) {
  const blocks = Number(args.value("--blocks", "10"));
  const trips = Number(args.value("--trips", "2000"));
  const rows: RecorderCost[] = [];
  const control = args.has("--control");
  for (const [t, c] of [
    ["shm", "cma"],
    ["uv", "basic"],
  ] as const)
    rows.push(await recorderCost(t, c, blocks, trips, control));
  const what = control ? "on (64 events) against on again (control)" : "on (64 events) and off";
  printResults(args, `8 B round trips (README loop, in one process), flight recorder ${what}, ${blocks} alternating blocks of ${trips} (us)`, rows, [
    { header: "pair", width: 11, left: true, cell: (r) => r.pair },
    { header: "on p50", width: 9, cell: (r) => fmt(r.onP50) },
    { header: "off p50", width: 9, cell: (r) => fmt(r.offP50) },
    { header: "on mean", width: 9, cell: (r) => fmt(r.onMean) },
    { header: "off mean", width: 10, cell: (r) => fmt(r.offMean) },
    { header: "p50 on/off (<= 1.02)", width: 22, cell: (r) => fmt(r.p50Ratio, 3) },
    { header: "mean on/off (<= 1.02)", width: 23, cell: (r) => fmt(r.meanRatio, 3) },
  ]);
}
