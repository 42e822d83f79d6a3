// A worker that reads its own memory with cma over and over, two reads at
// a time, and says when it has begun: the test terminates it mid-copy.
import { parentPort } from "node:worker_threads";
import { loadAddon } from "../../dist/native.js";

const { addon } = loadAddon();
const size = 64 * 1024 * 1024;
const source = new Uint8Array(size).fill(3);
const address = addon.addressOf(source, false);
// `source` stays referenced by the callback: its memory is what is read.
const again = (target) => addon.readv(process.pid, address, size, target, 2, false, () => source && again(target));
for (let i = 0; i < 2; i++) again(new Uint8Array(size));
parentPort.postMessage("reading");
