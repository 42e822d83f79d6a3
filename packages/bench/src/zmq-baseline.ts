/**
 * zeromq.js as a peer baseline: the same round trips and one-way transfers
 * as the pipes get, over a Pair socket per measurement kind, to a process
 * of its own (zmq-peer.ts). Where zeromq cannot load (its prebuilt binary
 * missing here), the baseline is left out, saying so.
 */
import { fileURLToPath } from "node:url";
import { type JsonChild, spawnJsonChild } from "./spawn-peer.js";

type Zmq = typeof import("zeromq");
type PairSocket = InstanceType<Zmq["Pair"]>;

export async function loadZmq(): Promise<{ zmq?: Zmq; reason?: string }> {
  try {
    return { zmq: await import("zeromq") };
  } catch (e) {
    return { reason: `zeromq is not installed (npm install zeromq): ${(e as Error).message.split("\n")[0]}` };
  }
}

export interface ZmqServers {
  echo: string;
  sink: string;
  close(): void;
}

/** The peer's side: an echo socket, and a sink that copies each message into one reused buffer and acks a batch. */
export async function startZmqServers(zmq: Zmq, host: string): Promise<ZmqServers> {
  const echo = new zmq.Pair();
  const sink = new zmq.Pair();
  await echo.bind(`tcp://${host}:*`);
  await sink.bind(`tcp://${host}:*`);
  void (async () => {
    for await (const [msg] of echo) await echo.send(msg!);
  })().catch(() => undefined);
  void (async () => {
    let landing = Buffer.alloc(0);
    for (;;) {
      const [header] = await sink.receive();
      const count = Number(header!.readBigUInt64LE(0));
      const size = Number(header!.readBigUInt64LE(8));
      if (landing.length < size) landing = Buffer.alloc(size);
      for (let i = 0; i < count; i++) {
        const [msg] = await sink.receive();
        msg!.copy(landing);
      }
      await sink.send(Buffer.from([1]));
    }
  })().catch(() => undefined);
  return {
    echo: echo.lastEndpoint!,
    sink: sink.lastEndpoint!,
    close() {
      echo.close();
      sink.close();
    },
  };
}

/** zmq-peer.js in a child process: its endpoints. */
export function spawnZmqPeer(host = "127.0.0.1"): Promise<JsonChild<{ echo: string; sink: string }>> {
  return spawnJsonChild([fileURLToPath(new URL("../dist/zmq-peer.js", import.meta.url)), host]);
}

/** The measuring side, connected to a peer's ZmqServers. */
export class ZmqClient {
  private constructor(
    private readonly echo: PairSocket,
    private readonly sink: PairSocket,
  ) {}

  static connect(zmq: Zmq, endpoints: { echo: string; sink: string }): ZmqClient {
    const echo = new zmq.Pair();
    const sink = new zmq.Pair();
    echo.connect(endpoints.echo);
    sink.connect(endpoints.sink);
    return new ZmqClient(echo, sink);
  }

  /** Round trips of `data`, in microseconds. */
  async roundTrips(data: Uint8Array, n: number): Promise<number[]> {
    const samples: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      await this.echo.send(data);
      await this.echo.receive();
      samples.push((performance.now() - t0) * 1000);
    }
    return samples;
  }

  /** GB/s of `count` messages of `data` into the peer's reused buffer. */
  async throughput(data: Uint8Array, count: number): Promise<number> {
    const header = Buffer.alloc(16);
    header.writeBigUInt64LE(BigInt(count), 0);
    header.writeBigUInt64LE(BigInt(data.length), 8);
    const t0 = performance.now();
    await this.sink.send(header);
    for (let i = 0; i < count; i++) await this.sink.send(data);
    await this.sink.receive();
    return (data.length * count) / ((performance.now() - t0) / 1000) / 1e9;
  }

  close(): void {
    this.echo.close();
    this.sink.close();
  }
}
