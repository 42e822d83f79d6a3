/**
 * The far end of the zeromq.js baseline: an echo socket and a sink socket
 * (zmq-baseline.ts), their endpoints printed as one JSON line, served until
 * stdin closes.
 *
 *   node packages/bench/dist/zmq-peer.js [HOST]
 */
import { loadZmq, startZmqServers } from "./zmq-baseline.js";

const { zmq, reason } = await loadZmq();
if (!zmq) {
  process.stderr.write(`${reason}\n`);
  process.exit(1);
}
const servers = await startZmqServers(zmq, process.argv[2] ?? "127.0.0.1");
process.stdout.write(`${JSON.stringify({ echo: servers.echo, sink: servers.sink })}\n`);
process.stdin.resume();
process.stdin.once("end", () => {
  servers.close();
  process.exit(0);
});
