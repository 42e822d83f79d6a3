// One end of a pipe in a worker that the test terminates at a random point
// (or that calls process.exit() itself `exitAfterMs` after it starts to
// connect): it listens or connects, then streams both ways until the pipe
// fails, and reports each step to its parent.
import { parentPort, workerData } from "node:worker_threads";
import { createContext } from "@tensorpipe/bench";
import { streamUntilFailure } from "./stream.mjs";

const { role, url, transport, channel, bytes, exitAfterMs } = workerData;
// Nothing may reject this module's top-level await: on Node 20 an entry
// module that rejects while its worker is being terminated aborts the whole
// process (FATAL ERROR: v8::ToLocalChecked Empty MaybeLocal), and a connect
// or accept fails exactly then when the test ends the other end at once.
try {
  const context = await createContext({ transports: [transport], channels: [channel] });
  let pipe;
  if (role === "listen") {
    const listener = await context.listen(url);
    parentPort.postMessage({ step: "listening", address: listener.addresses()[0] });
    pipe = await listener.accept();
  } else {
    parentPort.postMessage({ step: "connecting" });
    // Timed from here, as the test times a termination: started with the
    // worker, a short one ended it while it still loaded the addons, before it
    // said "connecting", and the test waited for that in vain.
    if (exitAfterMs !== undefined) setTimeout(() => process.exit(0), exitAfterMs);
    pipe = await context.connect(url);
  }
  parentPort.postMessage({ step: "streaming" });
  const codes = await streamUntilFailure(pipe, bytes);
  parentPort.postMessage({ step: "failed", codes });
} catch (err) {
  parentPort.postMessage({ step: "failed", codes: [err?.code ?? String(err)] });
}
