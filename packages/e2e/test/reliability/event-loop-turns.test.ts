import { Context, type Pipe } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerShmTransport } from "@tensorpipe/transport-shm";
import { registerUvTransport } from "@tensorpipe/transport-uv";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const floodWriter = fileURLToPath(new URL("../fixtures/flood-writer.mjs", import.meta.url));
const fastReader = fileURLToPath(new URL("../fixtures/fast-reader.mjs", import.meta.url));

/**
 * Runs `step` over and over for a second, with a 1 ms interval timer
 * beside it: how many steps, how often the timer fired, and the longest
 * time between two of its ticks (or from the start, or to the end).
 */
async function whileTimerTicks(step: () => Promise<unknown>): Promise<{ steps: number; ticks: number; longest: number }> {
  let last = performance.now();
  let longest = 0;
  let ticks = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    ticks++;
    longest = Math.max(longest, now - last);
    last = now;
  }, 1);
  const until = performance.now() + 1000;
  let steps = 0;
  while (performance.now() < until) {
    await step();
    steps++;
  }
  clearInterval(ticker);
  longest = Math.max(longest, performance.now() - last);
  return { steps, ticks, longest };
}

/** `count` pipes accepted here from `fixture`, run in a child process; stopped after `use`. */
async function withChild(register: (c: Context) => unknown, url: string, fixture: string, use: (pipes: Pipe[]) => Promise<void>, count = 1): Promise<void> {
  const server = new Context();
  register(server);
  registerBasicChannel(server);
  const listener = await server.listen(url);
  const child = spawn(process.execPath, [fixture, listener.addresses()[0]!, String(count)], { stdio: "inherit" });
  try {
    const pipes: Pipe[] = [];
    while (pipes.length < count) pipes.push(await listener.accept());
    await use(pipes);
  } finally {
    child.kill();
    await server.close();
  }
}

const transports = [
  ["shm", registerShmTransport, "shm://*"],
  ["uv", registerUvTransport, "uv://127.0.0.1:0"],
] as const;

describe.each(transports)("reading from a peer that keeps the %s connection full", (_name, register, url) => {
  it("leaves the event loop turns: timers fire while every read finds its bytes already here", async () => {
    await withChild(register, url, floodWriter, async ([pipe]) => {
      // The flood is under way once the first messages are here.
      for (let i = 0; i < 100; i++) await pipe!.readMessage();
      const { steps, ticks, longest } = await whileTimerTicks(() => pipe!.readMessage());
      expect(steps).toBeGreaterThan(1000);
      // Held in one chain of reads, the loop would not turn for the whole second.
      expect(ticks).toBeGreaterThan(50);
      expect(longest).toBeLessThan(200);
    });
  });

  it("leaves it turning with 64 pipes flooded at once: woken in one turn, they share one count", async () => {
    await withChild(
      register,
      url,
      floodWriter,
      async (pipes) => {
        let read = 0;
        let stop = false;
        const readers = pipes.map(async (pipe) => {
          while (!stop) {
            await pipe.readMessage();
            read++;
          }
        });
        while (read < 100 * pipes.length) await new Promise((r) => setTimeout(r, 10));
        // Held a while, as a busy server is: every ring fills meanwhile.
        const until = performance.now() + 300;
        while (performance.now() < until);
        const { ticks, longest } = await whileTimerTicks(() => new Promise((r) => setTimeout(r, 10)));
        stop = true;
        for (const p of pipes) p.close();
        await Promise.allSettled(readers);
        expect(ticks).toBeGreaterThan(50);
        // With a count for each pipe's wake-up, the 64 full rings held the loop for 136-300 ms.
        expect(longest).toBeLessThan(90);
      },
      64,
    );
  });
});

describe.each(transports)("writing over %s to a peer that reads as fast", (_name, register, url) => {
  it("leaves the event loop turns: timers fire while every write is taken at once", async () => {
    await withChild(register, url, fastReader, async ([pipe]) => {
      const message = { metadata: "m" };
      const { steps, ticks, longest } = await whileTimerTicks(() => pipe!.write(message));
      expect(steps).toBeGreaterThan(1000);
      expect(ticks).toBeGreaterThan(50);
      expect(longest).toBeLessThan(200);
    });
  });
});
