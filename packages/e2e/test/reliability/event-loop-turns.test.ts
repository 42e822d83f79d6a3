import { Context } from "@tensorpipe/core";
import { registerBasicChannel } from "@tensorpipe/channel-basic";
import { registerShmTransport } from "@tensorpipe/transport-shm";
import { registerUvTransport } from "@tensorpipe/transport-uv";
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";

const floodWriter = fileURLToPath(new URL("../fixtures/flood-writer.mjs", import.meta.url));

describe.each([
  ["shm", registerShmTransport, "shm://*"],
  ["uv", registerUvTransport, "uv://127.0.0.1:0"],
] as const)("reading from a peer that keeps the %s connection full", (_name, register, url) => {
  it("leaves the event loop turns: timers fire while every read finds its bytes already here", async () => {
    const server = new Context();
    register(server);
    registerBasicChannel(server);
    const listener = await server.listen(url);
    const child = spawn(process.execPath, [floodWriter, listener.addresses()[0]!], { stdio: "inherit" });
    try {
      const pipe = await listener.accept();
      // The flood is under way once the first messages are here.
      for (let i = 0; i < 100; i++) await pipe.readMessage();
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
      let read = 0;
      while (performance.now() < until) {
        await pipe.readMessage();
        read++;
      }
      clearInterval(ticker);
      longest = Math.max(longest, performance.now() - last);
      expect(read).toBeGreaterThan(1000);
      // Held in one chain of reads, the loop would not turn for the whole second.
      expect(ticks).toBeGreaterThan(50);
      expect(longest).toBeLessThan(200);
    } finally {
      child.kill();
      await server.close();
    }
  });
});
