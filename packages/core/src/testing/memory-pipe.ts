/**
 * Two ends of a pipe in one process, over connections in memory and a
 * CPU channel of plain frames, with no handshake and no native addon: for
 * testing a pipe's behaviour (and code that uses pipes) deterministically,
 * with the MemoryNetwork held and stepped by hand where the order of
 * deliveries matters.
 */
import type { Channel } from "../channel.js";
import { CPU_DEVICE, cpuBytes, type TensorBuffer } from "../device.js";
import type { PipeParts } from "../pipe/parts.js";
import { Pipe } from "../pipe/pipe.js";
import { DEFAULT_DESCRIPTOR_LIMITS, type DescriptorLimits } from "../protocol/message.js";
import { DONE, type Connection, writeFrame } from "../transport.js";
import { type MemoryConnection, MemoryNetwork } from "./memory-connection.js";

/** How a memory pipe's channel finishes a send. */
export type MemoryChannelKind =
  /** Once its frame is written, as basic does. */
  | "frames"
  /** Once the receiver says the bytes have landed, as cma does: the acknowledgement comes on a connection of the channel's own. */
  | "acknowledged";

/** Options of memoryPipePair(). */
export interface MemoryPipeOptions {
  /** The network the pipe's connections cross (default: a new one, delivering on its own). */
  network?: MemoryNetwork | undefined;
  /** The CPU channel (default "frames"). */
  channel?: MemoryChannelKind | undefined;
  /** What a descriptor may announce (default: ContextOptions' defaults). */
  limits?: Partial<DescriptorLimits> | undefined;
  /** The largest descriptor frame (default 64 MiB). */
  maxDescriptorLength?: number | undefined;
  /** Events each end's flight recorder keeps (default 64). */
  flightRecorder?: number | undefined;
}

/** The connections of one end of a memory pipe, to cut or close by hand. */
export interface MemoryPipeConnections {
  main: MemoryConnection;
  reply: MemoryConnection;
  channel: MemoryConnection[];
}

/** Two ends of a memory pipe, their connections and the network between them. */
export interface MemoryPipePair {
  /** The end that would have dialled. */
  client: Pipe;
  /** The end that would have listened. */
  server: Pipe;
  network: MemoryNetwork;
  connections: { client: MemoryPipeConnections; server: MemoryPipeConnections };
}

/** basic's way: each tensor one frame on the channel's connection. */
class FrameChannel implements Channel {
  constructor(private readonly connection: Connection) {}

  send(buffer: TensorBuffer, length: number): Promise<void> {
    return length === 0 ? DONE : writeFrame(this.connection, cpuBytes(buffer, length, "memory"));
  }

  recv(buffer: TensorBuffer, length: number): Promise<void> {
    return length === 0 ? DONE : this.connection.readInto(cpuBytes(buffer, length, "memory"));
  }

  close(error?: Error): void {
    this.connection.close(error);
  }
}

const ACK = Uint8Array.of(1);

/** cma's way: a send is done once the receiver acknowledges it, on the connection the bytes went over. */
class AcknowledgedChannel implements Channel {
  /** `out` carries this end's bytes and their acknowledgements back; `into` the peer's bytes and this end's acknowledgements. */
  constructor(
    private readonly out: Connection,
    private readonly into: Connection,
  ) {}

  send(buffer: TensorBuffer, length: number): Promise<void> {
    const written = writeFrame(this.out, cpuBytes(buffer, length, "memory"));
    const acked = this.out.read(1).then(() => undefined);
    return written === DONE ? acked : Promise.all([written, acked]).then(() => undefined);
  }

  recv(buffer: TensorBuffer, length: number): Promise<void> {
    return this.into.readInto(cpuBytes(buffer, length, "memory")).then(() => writeFrame(this.into, ACK));
  }

  close(error?: Error): void {
    this.out.close(error);
    this.into.close(error);
  }
}

function parts(side: "connect" | "listen", c: MemoryPipeConnections, channel: Channel, options: MemoryPipeOptions): PipeParts {
  return {
    transport: "memory",
    main: c.main,
    reply: c.reply,
    channels: new Map([["memory", channel]]),
    channelConnections: new Map([["memory", c.channel]]),
    pairs: [{ local: CPU_DEVICE, remote: CPU_DEVICE, channel: "memory" }],
    peer: c.main.remoteAddress,
    side,
    options: {
      maxDescriptorLength: options.maxDescriptorLength ?? 64 * 1024 * 1024,
      limits: { ...DEFAULT_DESCRIPTOR_LIMITS, ...options.limits },
      flightRecorder: options.flightRecorder ?? 64,
    },
    path: {
      side,
      transport: "memory",
      pairs: [{ local: CPU_DEVICE, remote: CPU_DEVICE, channel: "memory" }],
      offeredHere: { transports: ["memory"], channels: ["memory"] },
      offeredThere: { transports: ["memory"], channels: ["memory"] },
      peerReported: true,
      verdicts: [],
    },
    events: [],
  };
}

/** Two ends of a pipe over connections in memory (see MemoryNetwork to order deliveries by hand). */
export function memoryPipePair(options: MemoryPipeOptions = {}): MemoryPipePair {
  const network = options.network ?? new MemoryNetwork();
  const [clientMain, serverMain] = network.pair(["client main", "server main"]);
  const [clientReply, serverReply] = network.pair(["client reply", "server reply"]);
  const kind = options.channel ?? "frames";
  const lanes = Array.from({ length: kind === "frames" ? 1 : 2 }, (_, i) => network.pair([`client channel ${i}`, `server channel ${i}`]));
  const client: MemoryPipeConnections = { main: clientMain, reply: clientReply, channel: lanes.map(([c]) => c) };
  const server: MemoryPipeConnections = { main: serverMain, reply: serverReply, channel: lanes.map(([, s]) => s) };
  const channelOf = (c: MemoryPipeConnections, outFirst: boolean): Channel =>
    kind === "frames" ? new FrameChannel(c.channel[0]!) : new AcknowledgedChannel(c.channel[outFirst ? 0 : 1]!, c.channel[outFirst ? 1 : 0]!);
  return {
    client: new Pipe(parts("connect", client, channelOf(client, true), options)),
    server: new Pipe(parts("listen", server, channelOf(server, false), options)),
    network,
    connections: { client, server },
  };
}
