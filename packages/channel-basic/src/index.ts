import { type Channel, type ChannelContext, type Connection, type Context, CPU_DEVICE, DONE, type DeviceDescriptor, type TensorBuffer, VIABLE, type Viability, cpuBytes, writeFrame, type ChannelBackend, registerBackend } from "@tensorpipe/core/backend";

/**
 * One end of a basic channel: each tensor is one frame on its own transport
 * connection, written from and read into the user's memory by the transport.
 * A zero-length tensor is no frame at all, on either end: upstream's basic
 * channel completes it at once, and a frame of 0 bytes would put the two
 * ends out of step with a C++ peer.
 */
export class BasicChannel implements Channel {
  constructor(private readonly connection: Connection) {}

  /** Sends the first `length` bytes of `buffer`; resolves when the buffer may be reused. */
  send(buffer: TensorBuffer, length: number): Promise<void> {
    if (length === 0) return DONE;
    try {
      return writeFrame(this.connection, cpuBytes(buffer, length, "basic"));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Receives `length` bytes into `buffer`; resolves when they have landed. */
  recv(buffer: TensorBuffer, length: number): Promise<void> {
    if (length === 0) return DONE;
    try {
      return this.connection.readInto(cpuBytes(buffer, length, "basic"));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Ends the channel; pending sends and receives reject with `error` (or ERR_TP_CLOSED). */
  close(error?: Error): void {
    this.connection.close(error);
  }
}

/** Upstream's "basic" channel: CPU tensors over the pipe's transport, any two machines. */
export class BasicChannelContext implements ChannelContext {
  /** Whether the channel can work here, and if not why. */
  isViable(): Viability {
    return VIABLE;
  }

  deviceDescriptors(): readonly DeviceDescriptor[] {
    return [{ device: CPU_DEVICE, descriptor: "any" }];
  }

  /** How many transport connections each channel needs. */
  numConnectionsNeeded(): number {
    return 1;
  }

  canCommunicateWithRemote(localDescriptor: string, remoteDescriptor: string): boolean {
    return localDescriptor === remoteDescriptor;
  }

  createChannel(connections: readonly Connection[]): Channel {
    return new BasicChannel(connections[0]!);
  }

  /** Releases what the backend holds; called by Context.close(). */
  async close(): Promise<void> {}
}

/** Upstream TensorPipe's priority for basic: the fallback below every other channel. */
export const BASIC_PRIORITY = 0;

/** Options of the basic channel: none yet (for the same shape as every backend's). */
export interface BasicChannelOptions {}

/** The basic channel for registries (the CLI, a user's own): its kind, name, default priority and how to make one. */
export const backend: ChannelBackend<BasicChannelOptions, BasicChannelContext> = {
  kind: "channel",
  name: "basic",
  priority: BASIC_PRIORITY,
  create: () => new BasicChannelContext(),
};

/** Registers the basic channel with `context`, made with `options`, at its default priority unless told. */
export function registerBasicChannel(context: Context, options?: BasicChannelOptions, priority = BASIC_PRIORITY): BasicChannelContext {
  return registerBackend(context, backend, options, priority);
}
