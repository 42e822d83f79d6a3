import { execFileSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { stat } from "node:fs/promises";
import { Worker } from "node:worker_threads";
import { hasPattern, patterned } from "@tensorpipe/core/testing";
import { describe, expect, it } from "vitest";
import { loadAddon } from "../src/native.js";

const MiB = 1024 * 1024;
const { addon } = loadAddon();

/** Reads `source` (in this process) into `target`; resolves with it once copied. */
function read(source: Uint8Array, parallelism = 2, target = new Uint8Array(source.length)): Promise<Uint8Array> {
  return new Promise((resolve, reject) =>
    addon!.readv(process.pid, addon!.addressOf(source, false), source.length, target, parallelism, false, (err) => (err ? reject(err) : resolve(target))),
  );
}

const threads = () => readdirSync("/proc/self/task").length;

describe("cma copiers", () => {
  it("copy reads in the order they were asked for: a large read ends before a smaller one asked after it", async () => {
    const large = patterned(64 * MiB, 1);
    const small = patterned(48 * MiB, 2);
    const ended: string[] = [];
    const endedAs =
      (name: string) =>
      <T>(t: T): T => {
        ended.push(name);
        return t;
      };
    const copies = [read(large).then(endedAs("large")), read(small).then(endedAs("small"))];
    const [a, b] = await Promise.all(copies);
    expect(ended).toEqual(["large", "small"]);
    expect(hasPattern(a!, 1) && hasPattern(b!, 2)).toBe(true);
  });

  it("leave libuv's thread pool to the rest of the process", async () => {
    // As many reads as the pool has threads, on one copier: cut into parts
    // on the pool they would take every thread of it. Here the first alone
    // takes about 16 ms, and the other core is free.
    const source = patterned(128 * MiB, 3);
    const target = new Uint8Array(source.length);
    let copied = 0;
    const copies = [0, 1, 2, 3].map(() => read(source, 1, target).then(() => copied++));
    // A file-system call goes through the pool: it must not wait for a copy.
    await stat(import.meta.dirname);
    expect(copied).toBe(0);
    await Promise.all(copies);
    expect(hasPattern(target, 3)).toBe(true);
  });

  it("keep the process alive until the last read has landed", () => {
    const script = `
      import { loadAddon } from ${JSON.stringify(new URL("../dist/native.js", import.meta.url).href)};
      const { addon } = loadAddon();
      const source = new Uint8Array(64 * 1024 * 1024).fill(7);
      const target = new Uint8Array(source.length);
      // The source is referenced until the copy has landed, as a sender's is.
      addon.readv(process.pid, addon.addressOf(source, false), source.length, target, 2, false, (err) =>
        console.log(err ? err.message : "landed " + target[target.length - 1] + source[0]));`;
    expect(execFileSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8" })).toBe("landed 77\n");
  });

  it("go with their worker: terminated mid-copy, it leaves no thread behind", async () => {
    // The pool's threads (started by the first file-system call) are not the copiers'.
    await stat(import.meta.dirname);
    const before = threads();
    for (let i = 0; i < 3; i++) {
      const worker = new Worker(new URL("./workers/reader.mjs", import.meta.url));
      await new Promise((resolve, reject) => worker.once("message", resolve).once("error", reject));
      // The worker's thread and its two copiers.
      expect(threads()).toBeGreaterThanOrEqual(before + 3);
      await worker.terminate();
      await expect.poll(threads, { timeout: 5000 }).toBe(before);
    }
  });
});
