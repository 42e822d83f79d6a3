import { type Channel, type ChannelContext, type Connection, CPU_DEVICE, type DeviceDescriptor, VIABLE, type Viability } from "@tensorpipe/core/backend";
import { BasicChannel } from "./channel.js";

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

/** Options of the basic channel: none yet (for the same shape as every backend's). */
// biome-ignore lint/suspicious/noEmptyInterface: every backend takes options; this one's are to come.
export interface BasicChannelOptions {}
