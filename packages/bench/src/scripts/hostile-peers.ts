/**
 * What a hostile peer costs a listener, measured against a real one in a
 * process of its own (docs/security.md; the figures of the second hostile
 * round):
 * - 1024 pipes waiting for accept(), each offered with a dialler's path
 *   report of 470 verdicts of 2 KiB, against the same pipes offered
 *   without one: the listener's RSS a pipe;
 * - descriptors announcing 16,384 tensors of 128 KiB (four pipes) or 256
 *   KiB (32 pipes) each and not a byte of them, to a listener reading with
 *   `for await`: its RSS and CPU, and a real client's round trip meanwhile;
 * - under a 1024-descriptor limit, 1100 connections that send a whole
 *   offer and four bytes more and never open the connections asked for:
 *   how many of 48 real clients, a quarter second apart, get in;
 * - connect() to a listener that never answers, with a full GC every
 *   10 ms: when its deadline (2 s, and the default 10 s) fires.
 *
 *   node packages/bench/dist/scripts/hostile-peers.js [--only reports|announced|junk|deadlines] [--json]
 */
import { spawn } from "node:child_process";
import { type Server, type Socket, connect, createServer } from "node:net";
import { createInterface } from "node:readline";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { fileURLToPath } from "node:url";
import { CPU_DEVICE } from "@tensorpipe/core";
import { onTheWire, protocol } from "@tensorpipe/core/testing";
import { createContext } from "../index.js";
import { printResults, scriptArgs } from "./script.js";

const MiB = 1024 * 1024;

export interface HostileFigure {
  attack: string;
  figure: string;
}

/** The listener attacked: this script run with --victim MODE, in a process of its own. */
async function victim(mode: "hold" | "echo"): Promise<void> {
  const context = await createContext({ transports: ["uv"], channels: ["basic"] });
  const listener = await context.listen("uv://127.0.0.1:0");
  listener.on("connectionError", () => undefined);
  const say = (line: object) => process.stdout.write(`${JSON.stringify(line)}\n`);
  if (mode === "echo") {
    void (async () => {
      for await (const pipe of listener) {
        void (async () => {
          try {
            for await (const m of pipe)
              await pipe.write({ metadata: m.metadata, tensors: m.tensors.map((t) => ({ buffer: t.buffer, targetDevice: CPU_DEVICE })) });
          } catch {
            // The attack's pipes fail; the victim goes on.
          }
        })();
      }
    })();
  }
  createInterface({ input: process.stdin }).on("line", (line) => {
    if (line === "measure") {
      globalThis.gc?.();
      const { user, system } = process.cpuUsage();
      say({ rss: process.memoryUsage().rss, cpuMs: (user + system) / 1000 });
    }
  });
  say({ port: Number(listener.url().split(":").at(-1)) });
}

/** A victim process and a way to measure it. */
async function startVictim(mode: "hold" | "echo", fdLimit?: number) {
  const argv = ["--expose-gc", fileURLToPath(import.meta.url), "--victim", mode];
  const child =
    fdLimit === undefined
      ? spawn(process.execPath, argv, { stdio: ["pipe", "pipe", "inherit"] })
      : spawn("bash", ["-c", `ulimit -n ${fdLimit} && exec "$0" "$@"`, process.execPath, ...argv], { stdio: ["pipe", "pipe", "inherit"] });
  const lines = createInterface({ input: child.stdout! });
  const next = () => new Promise<Record<string, number>>((r) => lines.once("line", (l) => r(JSON.parse(l))));
  const { port } = await next();
  return {
    port: port!,
    async measure() {
      child.stdin!.write("measure\n");
      return (await next()) as { rss: number; cpuMs: number };
    },
    stop: () => child.kill(),
  };
}

const offer = (extra: Map<string, Map<string, { device: { type: string; index: number }; descriptor: string }>> = new Map()) =>
  onTheWire([
    protocol.encodePacket({ kind: "spontaneous", contextName: "" }),
    protocol.encodeBrochure({
      transportDomainDescriptors: new Map([["uv", "uv:*"]]),
      channelDeviceDescriptors: new Map([["basic", new Map([["cpu:0", { device: CPU_DEVICE, descriptor: "any" }]])], ...extra]),
    }),
  ]);

/** A TCP connection, and its next frame. */
async function open(port: number): Promise<{ socket: Socket; frame: () => Promise<Buffer> }> {
  const socket = connect(port, "127.0.0.1");
  socket.on("error", () => undefined);
  await new Promise((r) => socket.once("connect", r));
  let got = Buffer.alloc(0);
  const waiting: (() => void)[] = [];
  socket.on("data", (d: Buffer) => {
    got = Buffer.concat([got, d]);
    waiting.splice(0).forEach((w) => w());
  });
  const frame = async (): Promise<Buffer> => {
    for (;;) {
      if (got.length >= 8 && got.length >= 8 + Number(got.readBigUInt64LE(0))) {
        const n = Number(got.readBigUInt64LE(0));
        const f = got.subarray(8, 8 + n);
        got = got.subarray(8 + n);
        return f;
      }
      await new Promise<void>((r) => waiting.push(r));
    }
  };
  return { socket, frame };
}

/** A pipe opened by hand, as a foreign peer opens it: every connection its answer asks for. */
async function rawPipe(port: number, bytes: Buffer): Promise<Socket[]> {
  const main = await open(port);
  main.socket.write(bytes);
  const answer = protocol.decodeBrochureAnswer(await main.frame());
  const ids = [...answer.transportRegistrationIds.values(), ...[...answer.channelRegistrationIds.values()].flat()];
  const rest = await Promise.all(
    ids.map(async (id) => {
      const c = await open(port);
      c.socket.write(onTheWire([protocol.encodePacket({ kind: "requested", registrationId: id })]));
      return c.socket;
    }),
  );
  return [main.socket, ...rest];
}

async function unacceptedWithReports(): Promise<HostileFigure[]> {
  const verdicts = Array.from({ length: 470 }, (_, i) => ({
    kind: "channel",
    name: `c${i}`,
    by: "here",
    outcome: "not viable",
    reason: `not viable here: ${"why ".repeat(500)}`,
  }));
  const report = JSON.stringify({ offered: { transports: ["uv"], channels: ["basic"] }, verdicts });
  const withReport = offer(new Map([["tensorpipe-js.path-report", new Map([["report:0", { device: { type: "report", index: 0 }, descriptor: report }]])]]));
  const out: HostileFigure[] = [];
  for (const [what, bytes] of [
    ["without a report", offer()],
    [`with a ${(report.length / 1024).toFixed(0)} KiB report each`, withReport],
  ] as const) {
    const v = await startVictim("hold");
    const before = await v.measure();
    const held: Socket[] = [];
    for (let i = 0; i < 1024; i++) held.push(...(await rawPipe(v.port, bytes)));
    await new Promise((r) => setTimeout(r, 500));
    const after = await v.measure();
    out.push({
      attack: `1024 unaccepted pipes ${what}`,
      figure: `RSS +${((after.rss - before.rss) / MiB).toFixed(0)} MiB, ${((after.rss - before.rss) / 1024 / 1024).toFixed(0)} KiB a pipe`,
    });
    for (const s of held) s.destroy();
    v.stop();
  }
  return out;
}

async function announcedOnly(count: number, tensorKiB: number): Promise<HostileFigure> {
  const v = await startVictim("echo");
  const client = await createContext({ transports: ["uv"], channels: ["basic"] });
  const real = await client.connect(`uv://127.0.0.1:${v.port}`);
  const roundTrip = async () => {
    const t0 = performance.now();
    await real.write({ metadata: "hi" });
    await real.readMessage();
    return performance.now() - t0;
  };
  await roundTrip();
  const before = await v.measure();
  const descriptor = protocol.encodeDescriptor({
    metadata: "",
    payloads: [],
    tensors: Array.from({ length: 16_384 }, () => ({ length: tensorKiB << 10, sourceDevice: CPU_DEVICE, targetDevice: CPU_DEVICE, metadata: "" })),
  });
  const pipes = await Promise.all(Array.from({ length: count }, () => rawPipe(v.port, offer())));
  for (const p of pipes) p[0]!.write(onTheWire([descriptor]));
  // A real client's round trip while the victim takes them in.
  let worst = 0;
  for (let i = 0; i < 20; i++) {
    worst = Math.max(worst, await roundTrip());
    await new Promise((r) => setTimeout(r, 100));
  }
  const after = await v.measure();
  await client.close();
  for (const s of pipes.flat()) s.destroy();
  v.stop();
  return {
    attack: `${count} descriptors of 16,384 x ${tensorKiB} KiB, no bytes`,
    figure: `RSS +${((after.rss - before.rss) / MiB).toFixed(0)} MiB, ${(after.cpuMs - before.cpuMs).toFixed(0)} ms CPU, a round trip <= ${worst.toFixed(0)} ms`,
  };
}

async function junkHandshakes(): Promise<HostileFigure> {
  const v = await startVictim("echo", 1024);
  const junk = Buffer.concat([offer(), Buffer.from([1, 2, 3, 4])]);
  const held: Socket[] = [];
  for (let i = 0; i < 1100; i++) {
    const s = connect(v.port, "127.0.0.1");
    s.on("error", () => undefined);
    s.once("connect", () => s.write(junk));
    held.push(s);
  }
  await new Promise((r) => setTimeout(r, 1000));
  const client = await createContext({ transports: ["uv"], channels: ["basic"] });
  let admitted = 0;
  for (let i = 0; i < 48; i++) {
    try {
      const pipe = await client.connect(`uv://127.0.0.1:${v.port}`, { timeout: 2000 });
      await pipe.write({ metadata: "hi" });
      await pipe.readMessage({ timeout: 2000 });
      pipe.close();
      admitted++;
    } catch {
      // Kept out this time.
    }
    await new Promise((r) => setTimeout(r, 250));
  }
  await client.close();
  for (const s of held) s.destroy();
  v.stop();
  return { attack: "1100 offers + 4 junk bytes, 1024 descriptors", figure: `${admitted} of 48 real clients got in` };
}

async function deadlineAfterGc(): Promise<HostileFigure[]> {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc") as () => void;
  const held: Socket[] = [];
  const server: Server = createServer((s) => held.push(s.on("error", () => undefined)));
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const url = `uv://127.0.0.1:${(server.address() as { port: number }).port}`;
  const client = await createContext({ transports: ["uv"], channels: ["basic"] });
  const collecting = setInterval(gc, 10);
  const out: HostileFigure[] = [];
  for (const timeout of [2000, undefined]) {
    const started = performance.now();
    const outcome = await Promise.race([
      client.connect(url, timeout === undefined ? {} : { timeout }).then(
        () => "connected",
        (e: { code: string }) => e.code,
      ),
      new Promise<string>((r) => setTimeout(() => r("still pending"), 20_000)),
    ]);
    out.push({
      attack: `connect(${timeout === undefined ? "default 10 s" : `timeout ${timeout} ms`}) to a silent listener, GC every 10 ms`,
      figure: `${outcome} after ${((performance.now() - started) / 1000).toFixed(2)} s`,
    });
  }
  clearInterval(collecting);
  await client.close();
  for (const s of held) s.destroy();
  server.close();
  return out;
}

const args = scriptArgs(import.meta.url);
if (args?.has("--victim")) {
  await victim(args.value("--victim", "echo") as "hold" | "echo");
} else if (args) {
  const only = args.value("--only", "");
  const rows: HostileFigure[] = [];
  if (!only || only === "reports") rows.push(...(await unacceptedWithReports()));
  if (!only || only === "announced") rows.push(await announcedOnly(4, 128), await announcedOnly(32, 256));
  if (!only || only === "junk") rows.push(await junkHandshakes());
  if (!only || only === "deadlines") rows.push(...(await deadlineAfterGc()));
  printResults(args, "What a hostile peer costs a listener (docs/security.md)", rows, [
    { header: "attack", width: 72, cell: (r) => r.attack, left: true },
    { header: "figure", width: 40, cell: (r) => r.figure, left: true },
  ]);
}
