// The process that plays the connecting end of the channel suite for a
// RemoteSide: argv[2] is the module exporting `conformancePeer`.
import { Context } from "../context.js";
import { CPU_MEMORY, type ConformancePeer, LocalSide } from "./conformance-side.js";
import type { PeerReply, PeerRequest } from "./remote-side.js";

const { conformancePeer: peer } = (await import(process.argv[2]!)) as { conformancePeer: ConformancePeer };
const memory = peer.memory ?? CPU_MEMORY;
let context: Context | undefined;
let side: LocalSide | undefined;

function need(): LocalSide {
  if (!side) throw new Error("not connected");
  return side;
}

async function handle(request: PeerRequest): Promise<unknown> {
  switch (request.op) {
    case "connect": {
      context = new Context();
      context.registerTransport(0, request.transport, await peer.createTransport());
      context.registerChannel(0, request.channel, await peer.create());
      side = new LocalSide(await context.connect(request.url), memory);
      return undefined;
    }
    case "channelFor":
      return need().channelFor();
    case "write":
      return need().write(request.spec);
    case "receive":
      return need().receive();
    case "readDescriptor":
      return need().readDescriptor();
    case "close":
      return need().close();
    case "reset":
      await context?.close();
      side?.release();
      context = side = undefined;
      return undefined;
  }
}

process.on("message", (message: PeerRequest & { id: number }) => {
  const reply = (r: PeerReply) => process.send!(r);
  handle(message).then(
    (value) => reply({ id: message.id, ok: true, value }),
    (e: unknown) => {
      const err = e as { code?: string; message?: string };
      reply({ id: message.id, ok: false, error: { ...(err.code ? { code: err.code } : {}), message: String(err.message ?? e) } });
    },
  );
});
process.on("disconnect", () => {
  void context?.close().finally(() => {
    side?.release();
    process.exit(0);
  });
  if (!context) process.exit(0);
});
