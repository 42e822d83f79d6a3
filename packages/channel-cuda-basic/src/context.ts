import { BasicChannelContext } from "@tensorpipe/channel-basic";
import {
  type Channel,
  type ChannelContext,
  type Connection,
  type DeviceDescriptor,
  type Endpoint,
  type PipeInfo,
  type Viability,
  notViable,
} from "@tensorpipe/core/backend";
import { cudaInfo } from "@tensorpipe/cuda";
import { CudaBasicChannel } from "./channel.js";
import { PinnedPool } from "./pinned-pool.js";

/** Options of the cuda-basic channel. */
export interface CudaBasicChannelOptions {
  /**
   * The CPU channel the staged bytes travel on (default: basic, over the
   * pipe's transport). Its CPU descriptor decides which peers pair.
   */
  cpuChannel?: ChannelContext | undefined;
  /** Bytes per staging chunk (default 4 MiB). */
  chunkBytes?: number | undefined;
  /** Pinned chunks per direction, shared by this context's pipes (default 8). */
  poolChunks?: number | undefined;
}

const PREFIX = "cuda-basic/";

/**
 * GPU tensors between any two GPUs, on any two machines: staged through
 * pinned host memory and carried by a CPU channel. The fallback below
 * cuda-ipc (same machine) and cuda-gdr (InfiniBand).
 */
export class CudaBasicChannelContext implements ChannelContext {
  private readonly cpu: ChannelContext;
  private readonly sendPool: PinnedPool;
  private readonly recvPool: PinnedPool;

  constructor(options: CudaBasicChannelOptions = {}) {
    this.cpu = options.cpuChannel ?? new BasicChannelContext();
    const chunk = options.chunkBytes ?? 4 * 1024 * 1024;
    const chunks = options.poolChunks ?? 8;
    // Apart, so that sends held up by a slow peer never starve receives.
    this.sendPool = new PinnedPool(chunk, chunks);
    this.recvPool = new PinnedPool(chunk, chunks);
  }

  /** Whether the channel can work here, and if not why. */
  isViable(): Viability {
    const { viability, devices } = cudaInfo();
    if (!viability.viable) return viability;
    if (devices.length === 0) return notViable("the CUDA driver sees no GPU");
    const cpu = this.cpu.isViable();
    return cpu.viable ? cpu : notViable(`its CPU channel cannot work here: ${cpu.reason}`);
  }

  /** Every GPU, each with the CPU channel's own descriptor: any GPU reaches any GPU this way. */
  deviceDescriptors(): readonly DeviceDescriptor[] {
    const cpu = this.cpu.deviceDescriptors().find((d) => d.device.type === "cpu");
    if (!cpu) return [];
    return cudaInfo().devices.map((d) => ({ device: { type: "cuda", index: d.index }, descriptor: PREFIX + cpu.descriptor }));
  }

  /** How many transport connections each channel needs. */
  numConnectionsNeeded(): number {
    return this.cpu.numConnectionsNeeded();
  }

  acceptsConnectionCount(count: number): boolean {
    return this.cpu.acceptsConnectionCount?.(count) ?? count === this.cpu.numConnectionsNeeded();
  }

  canCommunicateWithRemote(localDescriptor: string, remoteDescriptor: string): boolean {
    if (!localDescriptor.startsWith(PREFIX) || !remoteDescriptor.startsWith(PREFIX)) return false;
    return this.cpu.canCommunicateWithRemote(localDescriptor.slice(PREFIX.length), remoteDescriptor.slice(PREFIX.length));
  }

  createChannel(connections: readonly Connection[], endpoint: Endpoint, pipe?: PipeInfo): Channel {
    return new CudaBasicChannel(this.cpu.createChannel(connections, endpoint, pipe), this.sendPool, this.recvPool);
  }

  /** Releases the pinned staging memory; called by Context.close(). */
  close(): Promise<void> {
    return this.cpu.close();
  }
}
