/**
 * A channel by a third party: CPU tensors, each sent as one frame on a
 * transport connection of its own. It uses nothing but what
 * `@tensorpipe/core/backend` exports, as any backend may.
 */
import {
  type Channel,
  type ChannelBackend,
  type ChannelContext,
  type Connection,
  type Context,
  CPU_DEVICE,
  type DeviceDescriptor,
  type TensorBuffer,
  VIABLE,
  type Viability,
  cpuBytes,
  registerBackend,
  writeFrame,
} from "@tensorpipe/core/backend";

/** One end of an inline channel. */
export class InlineChannel implements Channel {
  constructor(private readonly connection: Connection) {}

  send(buffer: TensorBuffer, length: number): Promise<void> {
    try {
      return writeFrame(this.connection, cpuBytes(buffer, length, "inline"));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  recv(buffer: TensorBuffer, length: number): Promise<void> {
    try {
      return this.connection.readInto(cpuBytes(buffer, length, "inline"));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  close(error?: Error): void {
    this.connection.close(error);
  }
}

/** Options of the inline channel: how its descriptor names it (ends pair only with the same). */
export interface InlineChannelOptions {
  /** Default "inline-v1". */
  version?: string;
}

/** The inline channel's backend: CPU only, anywhere. */
export class InlineChannelContext implements ChannelContext {
  private readonly version: string;

  constructor(options: InlineChannelOptions = {}) {
    this.version = options.version ?? "inline-v1";
  }

  isViable(): Viability {
    return VIABLE;
  }

  deviceDescriptors(): readonly DeviceDescriptor[] {
    return [{ device: CPU_DEVICE, descriptor: this.version }];
  }

  numConnectionsNeeded(): number {
    return 1;
  }

  canCommunicateWithRemote(local: string, remote: string): boolean {
    return local === remote;
  }

  createChannel(connections: readonly Connection[]): Channel {
    return new InlineChannel(connections[0]!);
  }

  async close(): Promise<void> {}
}

/** Between basic (0) and mpt (10). */
export const INLINE_PRIORITY = 5;

/** For registries (`tensorpipe doctor --backend tensorpipe-inline-channel-example`). */
export const backend: ChannelBackend<InlineChannelOptions, InlineChannelContext> = {
  kind: "channel",
  name: "inline",
  priority: INLINE_PRIORITY,
  create: (options) => new InlineChannelContext(options),
};

/** Registers the inline channel with `context`. */
export function registerInlineChannel(context: Context, options?: InlineChannelOptions, priority = INLINE_PRIORITY): InlineChannelContext {
  return registerBackend(context, backend, options, priority);
}
