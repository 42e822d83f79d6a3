// A worker that lends: a pipe within itself over shm + cma, twenty lent
// tensors held as views and one loan never written; it says so and waits
// for the test to terminate it.
import { Context } from "@tensorpipe/core";
import { registerShmTransport } from "@tensorpipe/transport-shm";
import { parentPort } from "node:worker_threads";
import { registerCmaChannel } from "../../dist/index.js";

const context = () => {
  const c = new Context();
  registerShmTransport(c);
  registerCmaChannel(c);
  return c;
};
const [a, b] = [context(), context()];
const listener = await b.listen("shm://");
const [writer, reader] = await Promise.all([a.connect(listener.addresses()[0]), listener.accept()]);
const held = [];
for (let i = 0; i < 20; i++) {
  const loan = await writer.loan(1 << 20);
  loan.fill(i);
  await writer.write({ tensors: [{ buffer: loan }] });
  held.push(await reader.readMessage());
}
const unsent = await writer.loan(4 << 20);
parentPort.postMessage({ held: held.length, last: held[19].tensors[0].buffer[5], unsent: unsent.byteLength });
setInterval(() => held, 1000);
