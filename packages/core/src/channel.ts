/**
 * The stable interface a channel backend implements. A channel moves tensor
 * bytes between two pipes' ends, using connections that core opens for it on
 * the pipe's transport (numConnectionsNeeded of them) plus whatever it has of
 * its own (shared memory, CUDA IPC, RDMA).
 */
import type { OperationOptions } from "./abort.js";
import type { Device, TensorBuffer } from "./device.js";
import type { Connection, TransportMedium } from "./transport.js";
import type { Viability } from "./viability.js";

/** A device a channel serves, and what the peer compares to see whether it can reach it. */
export interface DeviceDescriptor {
  /** The device. */
  device: Device;
  /** Equal strings on both ends mean the two devices may use this channel. */
  descriptor: string;
}

/** Which end of the handshake a channel is built on. */
export type Endpoint = "listen" | "connect";

/** What a channel may want to know of the pipe it serves: what its transport says of itself, the same at both ends. */
export interface PipeInfo {
  /** How the pipe's transport moves bytes (TransportContext.medium). */
  transportMedium: TransportMedium;
  /**
   * The peer's wireExtension() for this channel: undefined when the peer
   * is upstream TensorPipe, or a tensorpipe-js without one.
   */
  peerWireExtension?: string;
}

/** A channel backend: registered with Context.registerChannel(), it offers devices in the handshake and builds one Channel per pipe. */
export interface ChannelContext {
  /** Whether the channel can work on this machine (a viable: false channel is never offered). */
  isViable(): Viability;
  /** The devices this channel can serve here, each with its descriptor. */
  deviceDescriptors(): readonly DeviceDescriptor[];
  /** How many transport connections each channel needs. */
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
   * Why two descriptors that do not pair differ, in words a user can act
   * on (cma: "pid namespaces differ: ..."), for the negotiation's reasons;
   * undefined when it cannot say more than that they differ.
   */
  describeMismatch?(localDescriptor: string, remoteDescriptor: string): string | undefined;
  /**
   * What this channel adds to upstream's wire between two tensorpipe-js
   * ends (cma: tensors sent inline, and at what size), or undefined when it
   * speaks upstream's wire alone. It travels in a handshake entry upstream
   * ignores, and createChannel() gets the peer's as
   * `pipe.peerWireExtension`: a channel whose peer's differs from its own
   * speaks upstream's wire, so that it interoperates with upstream
   * TensorPipe under the same name and descriptors.
   */
  wireExtension?(): string | undefined;
  /**
   * Builds one end of a channel over connections opened for it, in order.
   * `pipe` is the same at both ends: a choice made from it (how small a
   * tensor goes through the transport, say) is made alike at both ends.
   */
  createChannel(connections: readonly Connection[], endpoint: Endpoint, pipe?: PipeInfo): Channel;
  /** Releases what the backend holds; called by Context.close(). */
  close(): Promise<void>;
}

/**
 * One end of a channel inside a pipe. Sends and receives are matched in the
 * order they are issued; both ends issue them in message order.
 */
export interface Channel {
  /** Sends the first `length` bytes of `buffer`; resolves when the buffer may be reused. */
  send(buffer: TensorBuffer, length: number): Promise<void>;
  /** Receives `length` bytes into `buffer`; resolves when they have landed. */
  recv(buffer: TensorBuffer, length: number): Promise<void>;
  /**
   * CPU memory of `length` bytes that this channel sends without a copy
   * (a slot of a pool shared with the peer), for Pipe.loan(); undefined
   * where this pipe's channel has none, and the pipe then gives plain
   * memory. May wait for room under `options` (the caller's, checked
   * already): a channel makes their deadline (operationDeadline()) only
   * when it has to wait, so that a loan served at once costs no timer.
   */
  loan?(length: number, options: OperationOptions | undefined): Promise<Uint8Array> | undefined;
  /** Takes back a loan of this channel's that will not be sent (Pipe.unloan()): its memory is free for the next loan, `view` detached. */
  unloan?(view: Uint8Array): void;
  /**
   * Receives `length` bytes for memory the pipe makes (readMessage()): a
   * channel that got the sender's own memory (a loan) hands a view of it
   * to `landing.adopt()`, any other copies into `landing.make()`'s.
   * Without it the pipe receives into make()'s memory with recv().
   */
  recvLent?(length: number, landing: TensorLanding): Promise<void>;
  /** Ends the channel; pending sends and receives reject with `error` (or ERR_TP_CLOSED). */
  close(error?: Error): void;
}

/** Where a tensor read by readMessage() lands (Channel.recvLent). */
export interface TensorLanding {
  /** Fresh memory of the tensor's length, to copy it into. */
  make(): Uint8Array;
  /** Takes `view`, memory the sender lent, as the tensor; `release` gives it back to the sender. */
  adopt(view: Uint8Array, release: () => void): void;
}
