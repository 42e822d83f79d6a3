// Connects a pair over uv in this worker, detaches one end's socket and
// keeps it unclaimed, says "detached", then waits to be terminated: the
// moment a channel that takes sockets over (mpt) is between the two.
import { parentPort } from "node:worker_threads";
import { UvTransport } from "@tensorpipe/transport-uv";

const transport = new UvTransport();
const accepted = [];
const listener = await transport.listen("127.0.0.1:0", (c) => accepted.push(c));
const here = await transport.connect(listener.address());
while (accepted.length === 0) await new Promise((r) => setTimeout(r, 5));
const socket = await here.detach();
parentPort.postMessage({ detached: socket.fd });
setInterval(() => undefined, 1000);
