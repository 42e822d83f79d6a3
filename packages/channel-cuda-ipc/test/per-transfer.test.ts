/**
 * What cuda-ipc asks of the driver per transfer, counted by the CUDA
 * emulator (TENSORPIPE_CUDA_EMULATOR_COUNTS), which makes each IPC open as
 * slow as an H100's (about 155 us): the receiver opens a peer's allocation
 * once, however many tensors come from it, and no thread waits on the host
 * for a copy; the driver reports each copy done (cuLaunchHostFunc). The
 * answers that free the sender's memory go back one frame a message.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { cudaViability } from "@tensorpipe/cuda";
import { describe, expect, it, onTestFinished, vi } from "vitest";

const fixture = fileURLToPath(new URL("./fixtures/ipc-repeat.mjs", import.meta.url));
const emulated = (process.env.TENSORPIPE_CUDA_DRIVER ?? "").includes("emulator");

interface Counts {
  hostWaits: number;
  memHandleOpens: number;
  eventHandleOpens: number;
  hostFuncs: number;
}

/** What the receiver wrote on its connections after the handshake. */
interface Sent {
  writes: number;
  frames: number;
}

/** `count` messages of `per` tensors of `size`, from one allocation to one, between two processes; what each asked of the driver, and what the receiver wrote. */
async function transfers(count: number, size: number, per = 1): Promise<{ receiver: Counts; sender: Counts; sent: Sent }> {
  const dir = mkdtempSync(join(tmpdir(), "tp-cuda-counts-"));
  onTestFinished(() => rmSync(dir, { recursive: true, force: true }));
  const env = { ...process.env, TENSORPIPE_CUDA_EMULATOR_COUNTS: dir };
  const run = (args: string[]) => {
    const child = spawn(process.execPath, [fixture, ...args], { env, stdio: ["ignore", "pipe", "inherit"] });
    const exited = new Promise<number | null>((resolve) => child.once("exit", resolve));
    return { child, exited };
  };
  const receiver = run(["receive", String(count), String(size), String(per)]);
  let out = "";
  receiver.child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
  await vi.waitFor(() => expect(out).toContain("\n"), { timeout: 10_000 });
  const sender = run(["send", out.split("\n")[0]!, String(count), String(size), String(per)]);
  expect(await receiver.exited).toBe(0);
  expect(await sender.exited).toBe(0);
  const counts = (pid: number) => JSON.parse(readFileSync(join(dir, `${pid}.json`), "utf8")) as Counts;
  return { receiver: counts(receiver.child.pid!), sender: counts(sender.child.pid!), sent: JSON.parse(out.split("\n")[1]!) as Sent };
}

describe.skipIf(!emulated || !cudaViability().viable)("cuda-ipc per transfer, counted by the emulator", () => {
  it("opens a peer's allocation once and waits on the host for no copy", async () => {
    const few = await transfers(3, 1 << 20);
    const many = await transfers(24, 1 << 20);
    expect([few.receiver.memHandleOpens, many.receiver.memHandleOpens]).toEqual([1, 1]);
    // Whatever the receiver waits for on the host, it is not per transfer.
    expect(many.receiver.hostWaits).toBe(few.receiver.hostWaits);
    // Each copy's end comes from the driver.
    expect(many.receiver.hostFuncs - few.receiver.hostFuncs).toBe(21);
    expect(many.receiver.eventHandleOpens + many.sender.eventHandleOpens).toBe(0);
  });

  it("answers a message's tensors in one write of one frame, however many it has", async () => {
    const one = await transfers(4, 1 << 16, 1);
    const eight = await transfers(4, 1 << 16, 8);
    expect(one.sent).toEqual({ writes: 4, frames: 4 });
    expect(eight.sent).toEqual(one.sent);
    expect(eight.receiver.memHandleOpens).toBe(1);
  });
});
