/**
 * A peer running as another user (it drops to uid/gid 65534 before it
 * connects) that offers cma with the descriptor of the listener's user and
 * announces memory of `pid` ("self": its own): cma must never read across
 * users, whatever the descriptor claims.
 *
 * attacker.mjs URL PID|self ADDRESS
 */
import { CPU_DEVICE, Context } from "@tensorpipe/core";
import { registerUvTransport } from "@tensorpipe/transport-uv";
import { ForgedCmaContext } from "./forged-cma.mjs";

const [url, pid, address] = process.argv.slice(2);
// Made while still root: its descriptor carries uid 0, as the listener's does.
const forged = new ForgedCmaContext({ pid: pid === "self" ? process.pid : Number(pid), address: BigInt(address) });
const context = new Context();
// Loads the addon while its files are still readable.
registerUvTransport(context).isViable();
context.registerChannel(20, "cma", forged);
process.setgid(65534);
process.setuid(65534);
const say = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);
try {
  const pipe = await context.connect(url);
  say({ channel: pipe.channelFor(CPU_DEVICE, CPU_DEVICE), uid: process.getuid() });
  await pipe.write({ tensors: [{ buffer: new Uint8Array(8 << 20), targetDevice: CPU_DEVICE }] }).catch((e) => say({ write: e.message }));
} catch (e) {
  say({ error: e.code, message: e.message });
}
await context.close();
