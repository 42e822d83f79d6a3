/**
 * A client run on another test host (`ip netns exec NS node remote-client.js
 * JSON`): connects, runs a scenario, prints JSON lines. Scenarios:
 * - roundtrip: `messages` echoes of random sizes up to `maxBytes`, checked
 *   (with `loan`, each written from pipe.loan(): prints how many loans the
 *   write left in place, as plain memory is, and how many it took);
 * - throughput: one-way GB/s of `sizes` into the peer's reused buffer;
 * - stream: large writes until one fails, each with `timeout` ms (0: none,
 *   so that only the transport's peerTimeout can end it); prints
 *   "transferring" after the first, then how it ended;
 * - compare: `channels` against each other (compare-channels.ts), over
 *   pipes of their own.
 */
import { CPU_DEVICE, type Pipe } from "@tensorpipe/core";
import { hasPattern, patterned, prng } from "@tensorpipe/core/testing";
import { type BackendChoice, createContext, sinkThroughput } from "../index.js";
import { compareChannels } from "./compare-channels.js";

interface Job extends BackendChoice {
  url: string;
  scenario: "roundtrip" | "throughput" | "stream" | "compare";
  messages?: number;
  maxBytes?: number;
  sizes?: number[];
  count?: number;
  timeout?: number;
  rounds?: number;
  loan?: boolean;
}

const job = JSON.parse(process.argv[2]!) as Job;
const say = (o: object) => process.stdout.write(`${JSON.stringify(o)}\n`);
const context = await createContext(job);

async function roundtrip(pipe: Pipe): Promise<void> {
  const rand = prng(7);
  const n = job.messages ?? 20;
  const loans = { kept: 0, taken: 0 };
  for (let i = 0; i < n; i++) {
    const size = Math.floor(rand() * (job.maxBytes ?? 1 << 20));
    let buffer = patterned(size, i);
    if (job.loan) {
      const lent = await pipe.loan(size);
      lent.set(buffer);
      buffer = lent;
    }
    const w = pipe.write({ metadata: `m${i}`, tensors: [{ buffer, targetDevice: CPU_DEVICE }] });
    const m = await pipe.readMessage();
    await w;
    if (m.metadata !== `m${i}` || !hasPattern(m.tensors[0]!.buffer as Uint8Array, i)) throw new Error(`message ${i} came back wrong`);
    if (job.loan && size > 0) loans[buffer.byteLength === size && hasPattern(buffer, i) ? "kept" : "taken"]++;
  }
  say(job.loan ? { ok: true, messages: n, loans } : { ok: true, messages: n });
}

async function throughput(pipe: Pipe): Promise<void> {
  for (const size of job.sizes ?? [16 << 20]) {
    const tensor = new Uint8Array(size).fill(1);
    const count = job.count ?? 4;
    await sinkThroughput(pipe, tensor, count);
    say({ size, gbps: await sinkThroughput(pipe, tensor, count) });
  }
}

async function stream(pipe: Pipe): Promise<void> {
  const tensor = new Uint8Array(8 << 20).fill(2);
  const options = job.timeout === 0 ? undefined : { timeout: job.timeout ?? 2000 };
  for (let i = 0; ; i++) {
    const started = Date.now();
    try {
      await pipe.write({ metadata: "sink", tensors: [{ buffer: tensor, targetDevice: CPU_DEVICE }] }, options);
      await pipe.readDescriptor(options);
      await pipe.read({ payloads: [], tensors: [] }, options);
    } catch (e) {
      const err = e as { code?: string; message?: string };
      say({ ended: err.code, message: err.message, waitedMs: Date.now() - started });
      return;
    }
    if (i === 0) say({ transferring: true });
  }
}

try {
  if (job.scenario === "compare") {
    const { gbps } = await compareChannels(job.url, job.channels ?? ["basic"], {
      lanes: job.lanes ?? 4,
      sizes: job.sizes ?? [16 << 20],
      rounds: job.rounds ?? 3,
    });
    say({ gbps });
  } else {
    const pipe = await context.connect(job.url, { timeout: 5000 });
    say({ transport: pipe.transport, channel: pipe.channelFor(CPU_DEVICE, CPU_DEVICE) });
    await { roundtrip, throughput, stream }[job.scenario](pipe);
    pipe.close();
  }
} catch (e) {
  const err = e as { code?: string; message?: string };
  say({ error: err.code, message: err.message });
} finally {
  await context.close();
}
