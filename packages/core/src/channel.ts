/**
 * The stable interface a channel backend implements. A channel moves tensor
 * bytes between two pipes' ends, using connections that core opens for it on
 * the pipe's transport (numConnectionsNeeded of them) plus whatever it has of
 * its own (shared memory, CUDA IPC, RDMA).
 */
import type { Device, TensorBuffer } from "./device.js";
import type { Connection } from "./transport.js";
import type { Viability } from "./viability.js";

export interface DeviceDescriptor {
  device: Device;
  /** Equal strings on both ends mean the two devices may use this channel. */
  descriptor: string;
}

export type Endpoint = "listen" | "connect";

/** What a channel may want to know of the pipe it serves. */
export interface PipeInfo {
  /** The pipe's transport ("uv", "shm"), the same at both ends. */
  transport: string;
}

export interface ChannelContext {
  isViable(): Viability;
  /** The devices this channel can serve here, each with its descriptor. */
  deviceDescriptors(): readonly DeviceDescriptor[];
  numConnectionsNeeded(): number;
  /**
   * Whether a channel can be built on `count` connections when the
   * listening side registered another number than numConnectionsNeeded()
   * here (default: only that number).
   */
  acceptsConnectionCount?(count: number): boolean;
  /** Default rule: the descriptors are equal. */
  canCommunicateWithRemote(localDescriptor: string, remoteDescriptor: string): boolean;
  /**
   * Builds one end of a channel over connections opened for it, in order.
   * `pipe` is the same at both ends: a choice made from it (how small a
   * tensor goes through the transport, say) is made alike at both ends.
   */
  createChannel(connections: readonly Connection[], endpoint: Endpoint, pipe?: PipeInfo): Channel;
  close(): Promise<void>;
}

/**
 * One end of a channel inside a pipe. Sends and receives are matched in the
 * order they are issued; both ends issue them in message order.
 */
export interface Channel {
  send(buffer: TensorBuffer, length: number): Promise<void>;
  recv(buffer: TensorBuffer, length: number): Promise<void>;
  close(error?: Error): void;
}
