/**
 * The far end of shm-layers' bare-connection round trips: listens on the
 * shm transport alone (no pipe, no negotiation) and writes every frame back
 * as it comes, from the read's callback or after an await, as told. Prints
 * the address it listens on, then serves until its stdin closes.
 *
 *   node packages/bench/dist/scripts/shm-echo.js callback|await
 */
import { ShmTransport } from "@tensorpipe/transport-shm";
import { type Connection, DONE } from "@tensorpipe/core/backend";

const style = process.argv[2] === "await" ? "await" : "callback";
const transport = new ShmTransport();
const name = `tensorpipe-js-echo-${process.pid}`;

function echoFromCallbacks(c: Connection): void {
  const frames: Uint8Array[] = [];
  const next = (): void =>
    c.readFrame!(1 << 20, (err, frame) => {
      if (err) return;
      frames[0] = frame!;
      // The frame is lent: a write that waits for room still needs its
      // bytes, so the next read (which may reuse them) waits for it.
      const wrote = c.write(frames);
      if (wrote === DONE) next();
      else wrote.then(next, () => undefined);
    });
  next();
}

async function echoAfterAwaits(c: Connection): Promise<void> {
  try {
    for (;;) await c.write([await c.read(1 << 20)]);
  } catch {
    // The other side closed: the round trips are over.
  }
}

const listener = await transport.listen(name, (c) => (style === "callback" ? echoFromCallbacks(c) : void echoAfterAwaits(c)));
process.stdout.write(`${name}\n`);
process.stdin.resume();
process.stdin.on("end", () => {
  listener.close();
  process.exit(0);
});
