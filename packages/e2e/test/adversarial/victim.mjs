/**
 * The victim of the adversarial suite: a real listener in a process of its
 * own, echoing every message, that says on stdout (one JSON line each)
 * where it listens, every connection its listener dropped, every pipe's
 * path report, every pipe that ended (with its flight record) and every
 * message it takes a read for, and its RSS ("rss") or CPU time ("cpu")
 * when asked on stdin.
 *
 * victim.mjs '{"auth": {"secret": "..."}, ...ContextOptions}'
 */
import { createInterface } from "node:readline";
import { CPU_DEVICE, describeFlightEvents, describePathReport, diagnostics } from "@tensorpipe/core";
import { createContext } from "@tensorpipe/bench";

const options = JSON.parse(process.argv[2] ?? "{}");
const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
const failure = (e) => ({ code: e?.code, errnoName: e?.errnoName, message: e?.message, record: describeFlightEvents(e?.flightRecord ?? []) });

const context = await createContext({ transports: ["uv", "shm"], channels: ["basic", "cma"], ...options });
const listener = await context.listen(["uv://127.0.0.1:0", "shm://*"]);
listener.on("connectionError", (e) => say({ event: "connection-error", ...failure(e) }));
diagnostics.messageRead.subscribe((m) => say({ event: "reading", tensors: m.tensors.length }));

async function echo(pipe) {
  const { verdicts } = pipe.path;
  const chars = verdicts.reduce((n, v) => n + v.name.length + (v.pair?.length ?? 0) + v.reason.length, 0);
  say({ event: "path", verdicts: verdicts.length, chars, text: describePathReport(pipe.path) });
  pipe.closed.then((e) => say({ event: "pipe-closed", ...failure(e) }));
  try {
    for await (const m of pipe) {
      await pipe.write({
        metadata: m.metadata,
        payloads: m.payloads,
        tensors: m.tensors.map((t) => ({ buffer: t.buffer, targetDevice: CPU_DEVICE })),
      });
    }
    say({ event: "pipe-ended" });
  } catch (e) {
    say({ event: "pipe-error", ...failure(e) });
  }
}

(async () => {
  for await (const pipe of listener) void echo(pipe);
})();

createInterface({ input: process.stdin })
  .on("line", (line) => {
    if (line === "rss") {
      globalThis.gc?.();
      say({ event: "rss", rss: process.memoryUsage().rss });
    }
    if (line === "cpu") {
      const { user, system } = process.cpuUsage();
      say({ event: "cpu", cpu: (user + system) / 1000 });
    }
  })
  .on("close", async () => {
    await context.close();
    process.exit(0);
  });

say({ event: "listening", urls: listener.addresses(), pid: process.pid });
