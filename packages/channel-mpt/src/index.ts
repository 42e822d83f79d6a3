import { availableParallelism } from "node:os";
import {
  type Channel,
  type ChannelContext,
  type Connection,
  type Context,
  CPU_DEVICE,
  type DeviceDescriptor,
  type TensorBuffer,
  VIABLE,
  type Viability,
  cpuBytes,
} from "@tensorpipe/core";

export interface MptChannelOptions {
  /** TCP lanes per pipe (default: the cores, from 2 to 8). The listener's count wins. */
  lanes?: number;
  /** Tensors smaller than this go whole on one lane, lanes taken in turn (default 1 MiB). */
  minSplit?: number;
}

/**
 * Where each lane's share of a tensor of `length` bytes lies. Both ends
 * compute it from the length alone, in the same order, so no chunk headers
 * cross the wire: a small tensor goes whole on the next lane in turn, a
 * large one is cut into one 4 KiB-aligned slice per lane.
 */
export function stripes(length: number, lanes: number, minSplit: number, turn: number): { lane: number; offset: number; length: number }[] {
  if (length < minSplit) return [{ lane: turn % lanes, offset: 0, length }];
  const slice = Math.ceil(length / lanes / 4096) * 4096;
  const out: { lane: number; offset: number; length: number }[] = [];
  for (let lane = 0, offset = 0; lane < lanes && offset < length; lane++, offset += slice) {
    out.push({ lane, offset, length: Math.min(slice, length - offset) });
  }
  return out;
}

/**
 * One end of an mpt channel: each tensor striped over several connections
 * of the pipe's transport (lanes), each slice written from and read into
 * the user's memory by the transport, the lanes in flight side by side.
 */
export class MptChannel implements Channel {
  private sendTurn = 0;
  private recvTurn = 0;

  constructor(
    private readonly lanes: readonly Connection[],
    private readonly minSplit: number,
  ) {}

  send(buffer: TensorBuffer, length: number): Promise<void> {
    try {
      const bytes = cpuBytes(buffer, length, "mpt");
      const parts = stripes(length, this.lanes.length, this.minSplit, this.sendTurn++);
      return Promise.all(parts.map((p) => this.lanes[p.lane]!.write([bytes.subarray(p.offset, p.offset + p.length)]))).then(
        () => undefined,
      );
    } catch (e) {
      return Promise.reject(e);
    }
  }

  recv(buffer: TensorBuffer, length: number): Promise<void> {
    try {
      const bytes = cpuBytes(buffer, length, "mpt");
      const parts = stripes(length, this.lanes.length, this.minSplit, this.recvTurn++);
      return Promise.all(parts.map((p) => this.lanes[p.lane]!.readInto(bytes.subarray(p.offset, p.offset + p.length)))).then(
        () => undefined,
      );
    } catch (e) {
      return Promise.reject(e);
    }
  }

  close(error?: Error): void {
    for (const lane of this.lanes) lane.close(error);
  }
}

/**
 * Multi-path TCP: tensors striped over several lanes, for links where one
 * TCP stream cannot fill the pipe (latency, loss) and for spreading the
 * work over more than one socket.
 */
export class MptChannelContext implements ChannelContext {
  private readonly lanes: number;
  private readonly minSplit: number;

  constructor(options: MptChannelOptions = {}) {
    this.lanes = Math.max(1, Math.floor(options.lanes ?? Math.min(8, Math.max(2, availableParallelism()))));
    this.minSplit = options.minSplit ?? 1024 * 1024;
  }

  isViable(): Viability {
    return VIABLE;
  }

  deviceDescriptors(): readonly DeviceDescriptor[] {
    return [{ device: CPU_DEVICE, descriptor: "any" }];
  }

  numConnectionsNeeded(): number {
    return this.lanes;
  }

  /** Whatever number of lanes the listening side registered. */
  acceptsConnectionCount(count: number): boolean {
    return count >= 1 && count <= 64;
  }

  canCommunicateWithRemote(localDescriptor: string, remoteDescriptor: string): boolean {
    return localDescriptor === remoteDescriptor;
  }

  createChannel(connections: readonly Connection[]): Channel {
    return new MptChannel(connections, this.minSplit);
  }

  async close(): Promise<void> {}
}

/** Above basic, below the same-machine channels. */
export const MPT_PRIORITY = 10;

export function registerMptChannel(context: Context, options?: MptChannelOptions, priority = MPT_PRIORITY): MptChannelContext {
  const channel = new MptChannelContext(options);
  context.registerChannel(priority, "mpt", channel);
  return channel;
}
