import { availableParallelism } from "node:os";
import {
  type Channel,
  type ChannelContext,
  type Connection,
  CPU_DEVICE,
  type DeviceDescriptor,
  OptionChecks,
  VIABLE,
  type Viability,
} from "@tensorpipe/core/backend";
import { MptChannel } from "./channel.js";
import { loadAddon } from "./native.js";

/** The most bulk lanes a pipe has (each a TCP connection and two threads). */
const MAX_LANES = 64;

const check = new OptionChecks("MptChannelOptions");

/** Options of the mpt channel. */
export interface MptChannelOptions {
  /**
   * Bulk lanes per pipe, each its own TCP connection (default: the cores,
   * from 4 to 8). The listening side's count wins.
   */
  lanes?: number | undefined;
  /** Tensors smaller than this go whole over one connection (default 1 MiB); both ends must agree. */
  minSplit?: number | undefined;
  /** The largest chunk a lane takes at once (default 4 MiB). */
  maxChunk?: number | undefined;
  /**
   * Unsent bytes each threaded lane's socket may queue (TCP_NOTSENT_LOWAT;
   * 0: the kernel's default). Default 64 KiB over loopback where the lanes
   * outnumber the cores, else 0 (see defaultUnsentLimit).
   */
  maxUnsentBytes?: number | undefined;
  /**
   * Run the bulk lanes on their own threads where the transport hands its
   * sockets over (uv) and the addon loads (default true); else they run
   * through the transport in the event loop.
   */
  threads?: boolean | undefined;
}

/**
 * Multi-path TCP: large tensors cut into chunks spread over several lanes,
 * each lane on its own threads so that more than one core copies, for
 * links where one TCP stream cannot fill the pipe (latency, loss) and for
 * spreading the work over the machine's cores.
 */
export class MptChannelContext implements ChannelContext {
  private readonly lanes: number;
  private readonly minSplit: number;
  private readonly maxChunk: number;
  private readonly threads: boolean;
  private readonly maxUnsentBytes?: number;

  constructor(options: MptChannelOptions = {}) {
    check.object(options);
    this.lanes = check.wholeNumber("lanes", options.lanes, 1, MAX_LANES) ?? Math.min(8, Math.max(4, availableParallelism()));
    this.minSplit = check.wholeNumber("minSplit", options.minSplit, 0) ?? 1024 * 1024;
    this.maxChunk = check.wholeNumber("maxChunk", options.maxChunk, 1) ?? 4 * 1024 * 1024;
    this.threads = check.boolean("threads", options.threads) ?? true;
    this.maxUnsentBytes = check.wholeNumber("maxUnsentBytes", options.maxUnsentBytes, 0);
  }

  /** Whether the channel can work here, and if not why. */
  isViable(): Viability {
    return VIABLE;
  }

  /** Why the lanes would run in the event loop rather than on threads, or null. */
  threadsUnavailable(): string | null {
    if (!this.threads) return "threads: false was asked for";
    return loadAddon().error?.message ?? null;
  }

  /**
   * The wire format's version and the split size are in the descriptor:
   * two ends that frame chunks or route tensors differently must not pair
   * (version 1's lanes read only unpadded chunk headers).
   */
  deviceDescriptors(): readonly DeviceDescriptor[] {
    return [{ device: CPU_DEVICE, descriptor: `v2 split=${this.minSplit}` }];
  }

  /** One connection for small tensors, then the bulk lanes. */
  numConnectionsNeeded(): number {
    return 1 + this.lanes;
  }

  /** Whatever number of lanes the listening side registered. */
  acceptsConnectionCount(count: number): boolean {
    return count >= 1 && count <= 1 + MAX_LANES;
  }

  canCommunicateWithRemote(localDescriptor: string, remoteDescriptor: string): boolean {
    return localDescriptor === remoteDescriptor;
  }

  createChannel(connections: readonly Connection[]): Channel {
    return new MptChannel(connections, this.minSplit, this.maxChunk, this.threads, this.maxUnsentBytes);
  }

  /** Releases what the backend holds; called by Context.close(). */
  async close(): Promise<void> {}
}
