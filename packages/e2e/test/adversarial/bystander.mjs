/**
 * A process of the same user that has nothing to do with any pipe: it
 * holds a secret in memory and says where (pid and address), so that a
 * test can check that no peer gets a listener to read it.
 */
import { createRequire } from "node:module";

const addon = createRequire(import.meta.url)("../../../channel-cma/build/Release/tensorpipe_cma.node");
const secret = Buffer.alloc(8 << 20, "bystander's secret ");
process.stdout.write(`${JSON.stringify({ pid: process.pid, address: addon.addressOf(secret, false).toString(), length: secret.length })}\n`);
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
