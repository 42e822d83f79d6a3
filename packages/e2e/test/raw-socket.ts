import { type Socket, connect } from "node:net";
import { onTheWire, protocol } from "@tensorpipe/core/testing";

/** A node:net socket read as upstream frames, for playing a foreign peer. */
export class RawSocket {
  private buffered = Buffer.alloc(0);
  private waiters: (() => void)[] = [];
  ended = false;
  readonly closed: Promise<void>;

  constructor(readonly socket: Socket) {
    socket.setNoDelay(true);
    socket.on("data", (d: Buffer) => {
      this.buffered = Buffer.concat([this.buffered, d]);
      this.wake();
    });
    socket.on("error", () => undefined);
    this.closed = new Promise((r) =>
      socket.on("close", () => {
        this.ended = true;
        this.wake();
        r();
      }),
    );
  }

  static connect(port: number, host = "127.0.0.1"): Promise<RawSocket> {
    return new Promise((resolve, reject) => {
      const s = connect(port, host, () => resolve(new RawSocket(s)));
      s.once("error", reject);
    });
  }

  private wake(): void {
    for (const w of this.waiters.splice(0)) w();
  }

  async readExact(n: number): Promise<Buffer> {
    while (this.buffered.length < n) {
      if (this.ended) throw new Error(`socket closed with ${this.buffered.length} of ${n} bytes`);
      await new Promise<void>((r) => this.waiters.push(r));
    }
    const out = this.buffered.subarray(0, n);
    this.buffered = this.buffered.subarray(n);
    return out;
  }

  async readFrame(): Promise<Buffer> {
    const header = await this.readExact(8);
    return this.readExact(Number(header.readBigUInt64LE(0)));
  }

  /** Bytes that arrived and were not read yet. */
  get unread(): number {
    return this.buffered.length;
  }

  write(bytes: Uint8Array): void {
    this.socket.write(bytes);
  }
}

/** Channel entries of a brochure, by name: each device's key and descriptor. */
export type ChannelEntries = Map<string, Map<string, { device: { type: string; index: number }; descriptor: string }>>;

/** A new pipe's first bytes as a foreign peer sends them: its packet and an offer of uv + basic, with `extra` channel entries. */
export function offerByHand(extra: ChannelEntries = new Map()): Buffer {
  return onTheWire([
    protocol.encodePacket({ kind: "spontaneous", contextName: "" }),
    protocol.encodeBrochure({
      transportDomainDescriptors: new Map([["uv", "uv:*"]]),
      channelDeviceDescriptors: new Map([["basic", new Map([["cpu:0", { device: { type: "cpu", index: 0 }, descriptor: "any" }]])], ...extra]),
    }),
  ]);
}

/** A new pipe's first connection opened by hand, offering uv + basic (and `extra`) as a foreign peer would, and the listener's BrochureAnswer. */
export async function brochureByHand(
  port: number,
  extra?: ChannelEntries,
): Promise<{ main: RawSocket; answer: ReturnType<typeof protocol.decodeBrochureAnswer> }> {
  const main = await RawSocket.connect(port);
  main.write(offerByHand(extra));
  return { main, answer: protocol.decodeBrochureAnswer(await main.readFrame()) };
}
