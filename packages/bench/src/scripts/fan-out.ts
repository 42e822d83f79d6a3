/**
 * A front end and a pool of worker processes, as a serving front runs
 * one: the front keeps K requests in flight over N workers, each request a
 * batch (a Float32Array) with a small header, each answer a small result
 * tensor. The same pool over tensorpipe-js (negotiated: shm + cma on one
 * machine), child_process IPC (serialization "advanced"), zeromq.js
 * (Dealer/Router over ipc://) and, as the in-process reference,
 * worker_threads with transferred ArrayBuffers; interleaved, each round
 * in another order. Batches are reused (the front sends the same memory
 * again once it is answered) or fresh (a new array per request); the
 * "tensorpipe-loan" pool writes each batch from pipe.loan() (its workers
 * read it in place with readMessage() and release it), the same in both.
 *
 *   node packages/bench/dist/scripts/fan-out.js [--workers 1,4,8] [--sizes 16K,1M,16M]
 *        [--inflight 32] [--seconds 1.5] [--rounds 2] [--warm 1] [--warm-up N] [--kinds tensorpipe,...]
 *        [--worker-cpus 1] [--in-process] [--json]
 *
 * Each pool first runs `--warm` seconds at every size, unmeasured: on 2
 * cores five processes' JIT compiles starve behind their main threads and
 * a new pool takes seconds to reach its steady rate, which would land on
 * whichever run came first. cold-start.js measures that start apart.
 * `--warm-up N` has the tensorpipe pools' front and workers call
 * Context.warmUp() with N round trips before their first request, over
 * shm+cma only, the pair their pipes negotiate.
 *
 * Where the workers run, to tell the process boundary and the scheduler's
 * placement apart from the library's own cost: `--worker-cpus 1` confines
 * every worker process (IPC's, zeromq's, tensorpipe's) to those cores
 * (`taskset`, Linux), the front staying free; `--in-process` runs the
 * tensorpipe pools' workers as worker_threads of the front, over the same
 * pipes (their CPU is then the front's).
 *
 * Per run: requests/s, round-trip p50/p99, the front's CPU per request
 * (user + system), that of the front and its workers together (threads
 * are the front's), and the p99 of its event loop's delay.
 */
import { type ChildProcess, execFileSync, fork } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { monitorEventLoopDelay } from "node:perf_hooks";
import { fileURLToPath } from "node:url";
import { Worker, isMainThread, parentPort, workerData } from "node:worker_threads";
import { CPU_DEVICE, type Pipe } from "@tensorpipe/core";
import { createContext } from "../context.js";
import { parseSize, sizeLabel } from "../sizes.js";
import { percentile } from "../stats.js";
import { loadZmq } from "../zmq-baseline.js";
import { type Column, printResults, scriptArgs } from "./script.js";

const SELF = fileURLToPath(import.meta.url);
/** Floats in each answer. */
const RESULT_FLOATS = 256;
/** What the pools' pipes negotiate on one machine: all a warm-up needs to run. */
const WARM_PAIRS = ["shm+cma"];
/** Seconds of each run not counted: the pool's first requests. */
const WARMUP_S = 0.3;

type Kind = "tensorpipe" | "tensorpipe-loan" | "worker_threads" | "ipc" | "zeromq";
const KINDS: readonly Kind[] = ["tensorpipe", "tensorpipe-loan", "worker_threads", "ipc", "zeromq"];

/** One pool: send() a batch to worker `w`, resolved with the answer (and the batch, where sending transferred it away). */
interface Pool {
  /** The pool makes each batch itself (a loan): send() takes only its first float and its size. */
  readonly lends?: boolean;
  send(w: number, batch: Float32Array, bytes: number): Promise<{ result: Float32Array; batch?: Float32Array }>;
  close(): Promise<void>;
  /** The worker processes (none for threads, whose CPU is the front's). */
  readonly children: readonly ChildProcess[];
}

/** CPU microseconds (user + system) `child` has used, all its threads, from /proc (in clock ticks of 10 ms). */
function childCpuUs(child: ChildProcess): number {
  try {
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    const fields = readFileSync(`/proc/${child.pid}/stat`, "utf8").split(") ")[1]!.split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 10_000;
  } catch {
    return 0;
  }
}

/** The answers of one worker's requests, in the order they were sent (a pipe or a socket keeps order). */
class InOrder<T> {
  private readonly waiting: ((v: T) => void)[] = [];
  push(resolve: (v: T) => void): void {
    this.waiting.push(resolve);
  }
  settle(v: T): void {
    this.waiting.shift()?.(v);
  }
}

/** Answers matched to requests by id (IPC and threads answer out of order across workers). */
class ById<T> {
  private readonly pending = new Map<number, (v: T) => void>();
  private next = 0;
  /** A new request: its id, and the promise `settle(id, ...)` resolves. */
  open(): { id: number; answer: Promise<T> } {
    const id = this.next++;
    return { id, answer: new Promise<T>((resolve) => this.pending.set(id, resolve)) };
  }
  settle(id: number, v: T): void {
    const resolve = this.pending.get(id);
    this.pending.delete(id);
    resolve?.(v);
  }
}

// ---- the workers' side ------------------------------------------------------

/** A worker over tensorpipe-js: it answers each batch read into memory of its own, or (`lends`) read in place where the front lent it, given back once read. */
async function tensorpipeWorker(lends: boolean, warmUp: number, hello: (m: Record<string, unknown>) => void): Promise<void> {
  const context = await createContext({ transports: ["shm", "uv"], channels: ["cma", "basic"] });
  if (warmUp > 0) await context.warmUp({ roundTrips: warmUp, pairs: WARM_PAIRS });
  const listener = await context.listen(["shm://", "uv://127.0.0.1:0"]);
  hello({ urls: listener.addresses() });
  const result = new Float32Array(RESULT_FLOATS);
  for await (const pipe of listener) void (lends ? answerInPlace : answerInto)(pipe, result);
}

async function answerInto(pipe: Pipe, result: Float32Array): Promise<void> {
  let landing = new Float32Array(0);
  for (;;) {
    const d = await pipe.readDescriptor().catch(() => undefined);
    if (!d) return;
    const bytes = d.tensors[0]!.length;
    if (landing.byteLength < bytes) landing = new Float32Array(bytes / 4);
    await pipe.read({ payloads: [], tensors: [{ buffer: landing }] });
    result[0] = landing[0]!;
    void pipe.write({ metadata: d.metadata, tensors: [{ buffer: result, targetDevice: CPU_DEVICE }] }).catch(() => undefined);
  }
}

async function answerInPlace(pipe: Pipe, result: Float32Array): Promise<void> {
  try {
    for await (const m of pipe) {
      const batch = m.tensors[0]!.buffer;
      result[0] = new Float32Array(batch.buffer, batch.byteOffset, 1)[0]!;
      m.release();
      void pipe.write({ metadata: m.metadata, tensors: [{ buffer: result, targetDevice: CPU_DEVICE }] }).catch(() => undefined);
    }
  } catch {
    // The front went.
  }
}

function ipcWorker(): void {
  process.on("message", (m: { id: number; batch: Float32Array }) => {
    const result = new Float32Array(RESULT_FLOATS);
    result[0] = m.batch[0]!;
    process.send!({ id: m.id, result });
  });
  process.send!({ ready: true });
}

async function zeromqWorker(): Promise<void> {
  const { zmq } = await loadZmq();
  const router = new zmq!.Router();
  const dir = mkdtempSync(join(tmpdir(), "tp-fanout-"));
  const endpoint = `ipc://${join(dir, "w")}`;
  await router.bind(endpoint);
  // The front stops its workers with SIGTERM: the socket's folder goes with it.
  process.once("SIGTERM", () => {
    rmSync(dir, { recursive: true, force: true });
    process.exit(0);
  });
  process.send!({ endpoint });
  const result = new Float32Array(RESULT_FLOATS);
  for await (const [identity, header, batch] of router) {
    result[0] = new Float32Array(batch!.buffer, batch!.byteOffset, 1)[0]!;
    await router.send([identity!, header!, Buffer.from(result.buffer)]);
  }
}

function threadWorker(): void {
  parentPort!.on("message", (m: { id: number; batch: Float32Array }) => {
    const result = new Float32Array(RESULT_FLOATS);
    result[0] = m.batch[0]!;
    // The batch goes back with the answer: a front that reuses it gets it again, as its memory.
    parentPort!.postMessage({ id: m.id, result, batch: m.batch }, [result.buffer, m.batch.buffer as ArrayBuffer]);
  });
}

// ---- the front's side -------------------------------------------------------

/** Where the workers run (`--worker-cpus`, `--in-process`). */
interface Placement {
  /** Cores the worker processes are confined to, as taskset takes them ("1", "2-3"). */
  cpus?: string;
  /** The tensorpipe pools' workers are threads of the front. */
  inProcess: boolean;
}

async function spawnWorker(kind: Kind, placement: Placement, warmUp = 0): Promise<{ child: ChildProcess; hello: Record<string, unknown> }> {
  const child = fork(SELF, ["--worker", kind, String(warmUp)], {
    serialization: kind === "ipc" ? "advanced" : "json",
    stdio: ["ignore", "inherit", "inherit", "ipc"],
  });
  const [hello] = (await once(child, "message")) as [Record<string, unknown>];
  // Every thread of it, its helpers too; threads it starts later inherit it.
  if (placement.cpus !== undefined) execFileSync("taskset", ["-a", "-c", "-p", placement.cpus, String(child.pid)], { stdio: "ignore" });
  return { child, hello };
}

/** A tensorpipe worker as a thread of the front (`--in-process`). */
async function tensorpipeThread(lends: boolean, warmUp: number): Promise<{ thread: Worker; hello: Record<string, unknown> }> {
  const thread = new Worker(SELF, { workerData: { lends, warmUp } });
  const [hello] = (await once(thread, "message")) as [Record<string, unknown>];
  return { thread, hello };
}

async function stopAll(children: ChildProcess[]): Promise<void> {
  await Promise.all(
    children.map(async (c) => {
      if (c.exitCode !== null) return;
      const gone = once(c, "exit");
      c.kill();
      await gone;
    }),
  );
}

async function tensorpipePool(n: number, lends: boolean, warmUp: number, placement: Placement): Promise<Pool> {
  const threads = placement.inProcess ? await Promise.all(Array.from({ length: n }, () => tensorpipeThread(lends, warmUp))) : [];
  const workers = placement.inProcess
    ? []
    : await Promise.all(Array.from({ length: n }, () => spawnWorker(lends ? "tensorpipe-loan" : "tensorpipe", placement, warmUp)));
  const context = await createContext({ transports: ["shm", "uv"], channels: ["cma", "basic"] });
  if (warmUp > 0) await context.warmUp({ roundTrips: warmUp, pairs: WARM_PAIRS });
  const pipes: { pipe: Pipe; order: InOrder<{ result: Float32Array }> }[] = [];
  for (const { hello } of [...workers, ...threads]) {
    const pipe = await context.connect((hello.urls as string[]).find((u) => u.startsWith("shm://"))!);
    const order = new InOrder<{ result: Float32Array }>();
    pipes.push({ pipe, order });
    void (async () => {
      for (;;) {
        const d = await pipe.readDescriptor().catch(() => undefined);
        if (!d) return;
        const result = new Float32Array(RESULT_FLOATS);
        await pipe.read({ payloads: [], tensors: [{ buffer: result }] });
        order.settle({ result });
      }
    })();
  }
  return {
    lends,
    children: workers.map((w) => w.child),
    async send(w, batch, bytes) {
      const { pipe, order } = pipes[w]!;
      let buffer: Float32Array | Uint8Array = batch;
      if (lends) {
        buffer = await pipe.loan(bytes);
        new Float32Array(buffer.buffer, buffer.byteOffset, 1)[0] = batch[0]!;
      }
      return new Promise((resolve, reject) => {
        order.push(resolve);
        pipe.write({ metadata: "b", tensors: [{ buffer, targetDevice: CPU_DEVICE }] }).catch(reject);
      });
    },
    async close() {
      await context.close();
      await stopAll(workers.map((w) => w.child));
      await Promise.all(threads.map((t) => t.thread.terminate()));
    },
  };
}

async function ipcPool(n: number, placement: Placement): Promise<Pool> {
  const workers = await Promise.all(Array.from({ length: n }, () => spawnWorker("ipc", placement)));
  const answers = new ById<{ result: Float32Array }>();
  for (const { child } of workers) child.on("message", (m: { id: number; result: Float32Array }) => answers.settle(m.id, { result: m.result }));
  return {
    children: workers.map((w) => w.child),
    send(w, batch) {
      const { id, answer } = answers.open();
      workers[w]!.child.send({ id, batch });
      return answer;
    },
    close: () => stopAll(workers.map((w) => w.child)),
  };
}

async function zeromqPool(n: number, placement: Placement): Promise<Pool> {
  const { zmq } = await loadZmq();
  const workers = await Promise.all(Array.from({ length: n }, () => spawnWorker("zeromq", placement)));
  const dealers = workers.map(({ hello }) => {
    const d = new zmq!.Dealer();
    d.connect(hello.endpoint as string);
    const order = new InOrder<{ result: Float32Array }>();
    void (async () => {
      for await (const [, result] of d) order.settle({ result: new Float32Array(result!.buffer, result!.byteOffset, RESULT_FLOATS) });
    })();
    return { d, order };
  });
  const header = Buffer.from("b");
  return {
    children: workers.map((w) => w.child),
    send(w, batch) {
      const { d, order } = dealers[w]!;
      return new Promise((resolve, reject) => {
        order.push(resolve);
        d.send([header, Buffer.from(batch.buffer, batch.byteOffset, batch.byteLength)]).catch(reject);
      });
    },
    async close() {
      for (const { d } of dealers) d.close();
      await stopAll(workers.map((w) => w.child));
    },
  };
}

async function threadPool(n: number): Promise<Pool> {
  const threads = Array.from({ length: n }, () => new Worker(SELF));
  const answers = new ById<{ result: Float32Array; batch: Float32Array }>();
  for (const t of threads) t.on("message", (m: { id: number; result: Float32Array; batch: Float32Array }) => answers.settle(m.id, m));
  return {
    children: [],
    send(w, batch) {
      const { id, answer } = answers.open();
      threads[w]!.postMessage({ id, batch }, [batch.buffer as ArrayBuffer]);
      return answer;
    },
    async close() {
      await Promise.all(threads.map((t) => t.terminate()));
    },
  };
}

/** One measured run: `inflight` lanes over the pool's workers, each sending its batch and waiting for the answer, for `seconds`. */
async function run(pool: Pool, kind: Kind, workers: number, bytes: number, fresh: boolean, inflight: number, seconds: number): Promise<RunResult> {
  const latencies: number[] = [];
  let done = 0;
  let measuring = false;
  let stop = false;
  const lane = async (i: number) => {
    const w = i % workers;
    let batch: Float32Array = new Float32Array(pool.lends ? 1 : bytes / 4);
    while (!stop) {
      if (fresh && !pool.lends) batch = new Float32Array(bytes / 4);
      batch[0] = i;
      const t0 = performance.now();
      const answer = await pool.send(w, batch, bytes);
      if (measuring) {
        latencies.push((performance.now() - t0) * 1000);
        done++;
      }
      // A transferred batch was the worker's until it came back with the answer.
      if (answer.batch) batch = answer.batch;
    }
  };
  const lanes = Array.from({ length: inflight }, (_, i) => lane(i));
  await new Promise((r) => setTimeout(r, WARMUP_S * 1000));
  const loop = monitorEventLoopDelay({ resolution: 1 });
  loop.enable();
  const cpu0 = process.cpuUsage();
  const children0 = pool.children.reduce((sum, c) => sum + childCpuUs(c), 0);
  const t0 = performance.now();
  measuring = true;
  await new Promise((r) => setTimeout(r, seconds * 1000));
  measuring = false;
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const childrenUs = pool.children.reduce((sum, c) => sum + childCpuUs(c), 0) - children0;
  loop.disable();
  stop = true;
  await Promise.all(lanes);
  latencies.sort((a, b) => a - b);
  return {
    kind,
    workers,
    size: sizeLabel(bytes),
    buffers: fresh ? "fresh" : "reused",
    rps: done / elapsed,
    p50ms: percentile(latencies, 50) / 1000,
    p99ms: percentile(latencies, 99) / 1000,
    cpuUsPerRequest: (cpu.user + cpu.system) / Math.max(1, done),
    allCpuUsPerRequest: (cpu.user + cpu.system + childrenUs) / Math.max(1, done),
    loopDelayP99ms: loop.percentile(99) / 1e6,
  };
}

interface RunResult {
  kind: Kind;
  workers: number;
  size: string;
  buffers: "reused" | "fresh";
  rps: number;
  p50ms: number;
  p99ms: number;
  cpuUsPerRequest: number;
  /** The front's and its worker processes' together. */
  allCpuUsPerRequest: number;
  loopDelayP99ms: number;
}

/** Requests in flight at `bytes`: 16 MiB x K of fresh arrays is K x 16 MiB per kind, so fewer lanes there. */
function lanesFor(bytes: number, inflight: number): number {
  return bytes >= 16 << 20 ? Math.min(inflight, 8) : inflight;
}

async function main(): Promise<void> {
  const args = scriptArgs(import.meta.url)!;
  const workerCounts = args.value("--workers", "4").split(",").map(Number);
  const sizes = args.value("--sizes", "16K,1M,16M").split(",").map(parseSize);
  const inflight = Number(args.value("--inflight", "32"));
  const seconds = Number(args.value("--seconds", "1.5"));
  const rounds = Number(args.value("--rounds", "2"));
  const warmSeconds = Number(args.value("--warm", "1"));
  const warmUp = Number(args.value("--warm-up", "0"));
  const cpus = args.value("--worker-cpus", "");
  const placement: Placement = { cpus: cpus === "" ? undefined : cpus, inProcess: args.has("--in-process") };
  const zmqMissing = (await loadZmq()).reason;
  const asked = args.value("--kinds", KINDS.join(",")).split(",") as Kind[];
  const used = KINDS.filter((k) => asked.includes(k) && !(zmqMissing && k === "zeromq"));
  if (zmqMissing) console.error(`fan-out: ${zmqMissing}; zeromq left out`);
  const results: RunResult[] = [];
  for (const n of workerCounts) {
    const pools = new Map<Kind, Pool>();
    for (const k of used)
      pools.set(
        k,
        await (k === "tensorpipe" || k === "tensorpipe-loan"
          ? tensorpipePool(n, k === "tensorpipe-loan", warmUp, placement)
          : k === "ipc"
            ? ipcPool(n, placement)
            : k === "zeromq"
              ? zeromqPool(n, placement)
              : threadPool(n)),
      );
    try {
      for (const [kind, pool] of pools)
        for (const bytes of sizes) if (warmSeconds > 0) await run(pool, kind, n, bytes, false, lanesFor(bytes, inflight), warmSeconds);
      for (const bytes of sizes) {
        for (const fresh of [false, true]) {
          const k = lanesFor(bytes, inflight);
          const byKind = new Map<Kind, RunResult[]>();
          for (let r = 0; r < rounds; r++) {
            const order = used.map((_, i) => used[(i + r) % used.length]!);
            for (const kind of order) {
              const res = await run(pools.get(kind)!, kind, n, bytes, fresh, k, seconds);
              byKind.set(kind, [...(byKind.get(kind) ?? []), res]);
            }
          }
          // The median round of each kind, by requests/s.
          for (const list of byKind.values()) results.push(list.sort((a, b) => a.rps - b.rps)[Math.floor(list.length / 2)]!);
        }
      }
    } finally {
      for (const p of pools.values()) await p.close();
    }
  }
  const reference = (r: RunResult) =>
    results.find((x) => x.kind === "worker_threads" && x.workers === r.workers && x.size === r.size && x.buffers === r.buffers);
  const columns: Column<RunResult>[] = [
    { header: "N", width: 3, cell: (r) => String(r.workers) },
    { header: "size", width: 7, cell: (r) => r.size },
    { header: "buffers", width: 8, cell: (r) => r.buffers },
    { header: "  kind", width: 16, cell: (r) => `  ${r.kind}`, left: true },
    { header: "req/s", width: 9, cell: (r) => r.rps.toFixed(0) },
    { header: "x threads", width: 10, cell: (r) => ((reference(r)?.rps ?? Number.NaN) > 0 ? (r.rps / reference(r)!.rps).toFixed(2) : "n/a") },
    { header: "p50 ms", width: 9, cell: (r) => r.p50ms.toFixed(2) },
    { header: "p99 ms", width: 9, cell: (r) => r.p99ms.toFixed(2) },
    { header: "front us/req", width: 13, cell: (r) => r.cpuUsPerRequest.toFixed(0) },
    { header: "all us/req", width: 11, cell: (r) => r.allCpuUsPerRequest.toFixed(0) },
    { header: "loop p99 ms", width: 12, cell: (r) => r.loopDelayP99ms.toFixed(2) },
  ];
  const where = `${placement.cpus === undefined ? "" : `; worker processes on cores ${placement.cpus}`}${placement.inProcess ? "; tensorpipe workers in-process" : ""}`;
  printResults(
    args,
    `fan-out: a front with K=${inflight} in flight (8 at 16 MiB) over N workers; median of ${rounds} interleaved rounds of ${seconds} s${where}`,
    results,
    columns,
  );
}

const role = process.argv.indexOf("--worker");
if (!isMainThread) {
  const tp = workerData as { lends: boolean; warmUp: number } | undefined;
  if (tp) await tensorpipeWorker(tp.lends, tp.warmUp, (m) => parentPort!.postMessage(m));
  else threadWorker();
} else if (role >= 0) {
  const kind = process.argv[role + 1] as Kind;
  if (kind === "tensorpipe" || kind === "tensorpipe-loan")
    await tensorpipeWorker(kind === "tensorpipe-loan", Number(process.argv[role + 2]), (m) => process.send!(m));
  else if (kind === "ipc") ipcWorker();
  else await zeromqWorker();
} else await main();
