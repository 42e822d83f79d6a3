/**
 * `tensorpipe peer`: the other process of `tensorpipe bench` (and of the
 * repository's two-process tests and measurements). It listens with
 * TensorPipe on every viable transport and with plain node:net (the
 * baseline, on 127.0.0.1 alone: it has no authentication), prints its
 * addresses as one JSON line, and serves until stdin closes:
 * - a pipe message with metadata "sink" is read into one of two reused
 *   buffers in turn and acknowledged with an empty "ack" message once it
 *   has landed; any other message is echoed;
 * - the node:net echo server echoes bytes as fast as the client reads
 *   them; the node:net sink server is described where it is made.
 */
import { createServer } from "node:net";
import { type Allocation, CPU_DEVICE, type Descriptor, ErrorCode, type Message, type Pipe, TensorPipeError, allocateMessage } from "@tensorpipe/core";
import { type BackendChoice, chosen, createContext, findBackends, listenUrls } from "./backends.js";

/** What `tensorpipe peer` listens with. */
export interface PeerOptions extends BackendChoice {
  /** The address to listen on for TCP (default 127.0.0.1). */
  host?: string;
  /** A deadline for each of its reads and writes, in ms. */
  timeout?: number;
  /** Runs Context.warmUp() with this many round trips before it listens. */
  warmUp?: number | undefined;
}

/** The node:net sink's landing buffer at most: a client's header may ask for no more. */
const MAX_SINK_MESSAGE = 1 << 30;

async function serve(pipe: Pipe, ops: { timeout: number } | undefined): Promise<void> {
  // A failed read in flight and the readDescriptor after it both see the end.
  let over = false;
  const end = (e: unknown) => {
    if (!over) ended(e);
    over = true;
  };
  // Sink messages land in two buffers in turn, the next read posted while
  // the one before is still landing, as a streaming consumer double-buffers;
  // a buffer is taken again once the read that used it is done.
  const sinks = [0, 1].map(() => ({ memory: new ArrayBuffer(0), read: Promise.resolve() }));
  let turn = 0;
  const echoes = new Echoes();
  for (;;) {
    let d: Descriptor;
    try {
      d = await pipe.readDescriptor(ops);
    } catch (e) {
      end(e);
      return;
    }
    if (d.metadata === "sink") {
      const sink = sinks[(turn = 1 - turn)]!;
      await sink.read;
      if (over) return;
      // Pages are committed as bytes land, not as the client announces them.
      const allocation = allocateMessage(d, sink.memory);
      sink.memory = allocation.memory;
      sink.read = pipe.read(allocation, ops).then(() => void pipe.write({ metadata: "ack" }, ops).catch(() => undefined), end);
      continue;
    }
    // Each echo is written back before the next read: its memory, and the
    // objects describing it, are reused while messages keep their shape.
    const echo = echoes.for(d);
    try {
      await pipe.read(echo.allocation, ops);
      await pipe.write(echo.message, ops);
    } catch (e) {
      end(e);
      return;
    }
  }
}

/**
 * The allocation an echoed message is read into and the message that
 * sends it back, rebuilt only when a message differs in shape from the one
 * before (counts, lengths, metadata, targets): a tuned peer's loop makes no
 * garbage per message. Every part is carved from one reused buffer, whose
 * pages are committed as bytes land, not as a client announces them.
 */
class Echoes {
  private memory?: ArrayBuffer;
  private last?: Descriptor;
  private echo?: { allocation: Allocation; message: Message };

  for(d: Descriptor): { allocation: Allocation; message: Message } {
    if (this.echo && this.last && sameShape(this.last, d)) return this.echo;
    const allocation = allocateMessage(d, this.memory);
    this.memory = allocation.memory;
    const message: Message = {
      metadata: d.metadata,
      payloads: d.payloads.map((p, i) => ({ data: allocation.payloads[i]!.data, metadata: p.metadata })),
      tensors: d.tensors.map((t, i) => ({
        buffer: allocation.tensors[i]!.buffer,
        metadata: t.metadata,
        ...(t.targetDevice ? { targetDevice: CPU_DEVICE } : {}),
      })),
    };
    this.last = d;
    return (this.echo = { allocation, message });
  }
}

function sameShape(a: Descriptor, b: Descriptor): boolean {
  if (a.metadata !== b.metadata || a.payloads.length !== b.payloads.length || a.tensors.length !== b.tensors.length) {
    return false;
  }
  for (let i = 0; i < a.payloads.length; i++) {
    if (a.payloads[i]!.length !== b.payloads[i]!.length || a.payloads[i]!.metadata !== b.payloads[i]!.metadata) return false;
  }
  for (let i = 0; i < a.tensors.length; i++) {
    const x = a.tensors[i]!;
    const y = b.tensors[i]!;
    if (x.length !== y.length || x.metadata !== y.metadata || !x.targetDevice !== !y.targetDevice) return false;
  }
  return true;
}

/** Tells the parent, one JSON line on stdout, how a pipe ended. */
function ended(e: unknown): void {
  const err = e as { code?: string; message?: string };
  process.stdout.write(`${JSON.stringify({ event: "pipe-ended", code: err.code, message: err.message })}\n`);
}

/** Listens and serves until stdin closes. */
export async function runPeer(options: PeerOptions = {}): Promise<void> {
  const host = options.host ?? "127.0.0.1";
  // The baselines have no authentication: they serve this machine alone.
  const loopback = "127.0.0.1";
  const ops = options.timeout === undefined ? undefined : { timeout: options.timeout };
  // Whoever reads its events has gone (EPIPE): there is nobody left to serve.
  process.stdout.on("error", () => process.exit(0));
  const found = chosen(await findBackends(options), options);
  const context = await createContext(options, found);
  if (options.warmUp !== undefined) await context.warmUp({ roundTrips: options.warmUp });
  const urls = listenUrls(found, host);
  if (urls.length === 0) {
    const why = found
      .filter((b) => b.spec.kind === "transport")
      .map((b) => `${b.spec.name}: ${!b.installed ? "not installed" : b.viability.viable ? "it takes no address" : b.viability.reason}`);
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `no transport asked for can listen here (${why.join("; ") || "none installed"})`);
  }
  const listener = await context.listen(urls);
  listener.on("connectionError", (e) => process.stdout.write(`${JSON.stringify({ event: "connection-dropped", code: e.code, message: e.message })}\n`));
  (async () => {
    for await (const pipe of listener) void serve(pipe, ops);
  })();

  // Piped: a client that sends and never reads is read no faster than it reads.
  const echo = createServer((s) => {
    s.setNoDelay(true);
    s.on("error", () => undefined);
    s.pipe(s);
  }).listen(0, loopback);

  // Reads a 16-byte header (total bytes, message size), then the bytes, and
  // answers one byte. Message size 0: only count them; otherwise copy each
  // message into one reused buffer, as a tensor has to land somewhere. A
  // header asking for more than MAX_SINK_MESSAGE ends that connection.
  const sink = createServer((s) => {
    let header = Buffer.alloc(0);
    let total = -1;
    let messageSize = 0;
    let got = 0;
    let landing = Buffer.alloc(0);
    s.on("data", (d: Buffer) => {
      if (total < 0) {
        header = Buffer.concat([header, d]);
        if (header.length < 16) return;
        const announced = header.readBigUInt64LE(0);
        const size = header.readBigUInt64LE(8);
        if (announced > BigInt(Number.MAX_SAFE_INTEGER) || size > BigInt(MAX_SINK_MESSAGE)) {
          process.stdout.write(
            `${JSON.stringify({ event: "connection-dropped", message: `node:net sink: a header announcing ${announced} bytes in messages of ${size}, over ${MAX_SINK_MESSAGE}` })}\n`,
          );
          s.destroy();
          return;
        }
        total = Number(announced);
        messageSize = Number(size);
        if (landing.length < messageSize) landing = Buffer.alloc(messageSize);
        d = header.subarray(16);
      }
      if (messageSize > 0) {
        let offset = 0;
        while (offset < d.length) {
          const at = (got + offset) % messageSize;
          offset += d.copy(landing, at, offset, Math.min(d.length, offset + messageSize - at));
        }
      }
      got += d.length;
      if (got >= total) {
        s.write(Buffer.from([1]));
        total = -1;
        got = 0;
        header = Buffer.alloc(0);
      }
    });
    s.on("error", () => undefined);
  }).listen(0, loopback);

  await Promise.all([new Promise((r) => echo.once("listening", r)), new Promise((r) => sink.once("listening", r))]);
  const port = (s: typeof echo) => (s.address() as { port: number }).port;
  const info = {
    url: listener.addresses().find((u) => u.startsWith("uv://")) ?? listener.addresses()[0],
    urls: listener.addresses(),
    echoPort: port(echo),
    sinkPort: port(sink),
    pid: process.pid,
  };
  process.stdout.write(`${JSON.stringify(info)}\n`);

  process.stdin.resume();
  await new Promise((resolve) => process.stdin.once("end", resolve));
  echo.close();
  sink.close();
  await context.close();
}
