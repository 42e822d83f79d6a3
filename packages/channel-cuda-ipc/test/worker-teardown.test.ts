/**
 * A worker receiving over cuda-ipc, terminated with copies queued on its
 * stream and their ends still to come from the driver (cuLaunchHostFunc,
 * reported to the worker's loop through one uv_async): the process goes
 * on, the sender's pipe fails with a code, and the next worker does the
 * same. Run on the emulator, whose copies each take 500 us.
 */
import { spawn } from "node:child_process";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { Worker } from "node:worker_threads";
import { cudaViability } from "@tensorpipe/cuda";
import { describe, expect, it } from "vitest";

const fixture = fileURLToPath(new URL("./fixtures/ipc-stream.mjs", import.meta.url));

describe.skipIf(!cudaViability().viable)("cuda-ipc in a worker that is terminated mid-copy", () => {
  it("leaves the process and the sender standing, every time", async () => {
    for (let i = 0; i < 6; i++) {
      const worker = new Worker(fixture, { workerData: { role: "receive" } });
      worker.on("error", () => undefined);
      const exited = new Promise((r) => worker.once("exit", r));
      const url = await new Promise<string>((r) => worker.on("message", (m: { url?: string }) => m.url && r(m.url)));
      const sender = spawn(process.execPath, [fixture, "send", url], { stdio: ["ignore", "pipe", "inherit"] });
      let out = "";
      sender.stdout!.on("data", (d: Buffer) => (out += d));
      const senderExited = new Promise<number | null>((r) => sender.once("exit", r));
      await new Promise<void>((r) => worker.on("message", (m: { reading?: boolean }) => m.reading && r()));
      await sleep(i * 3);
      await worker.terminate();
      await exited;
      expect(await senderExited).toBe(0);
      expect(JSON.parse(out)).toMatchObject({ code: expect.stringMatching(/^ERR_TP_(PEER_CLOSED|CONNECTION_RESET)$/) });
    }
  });
});
