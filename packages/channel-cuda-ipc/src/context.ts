import {
  type Channel,
  type ChannelContext,
  type Connection,
  type DeviceDescriptor,
  type Endpoint,
  type PipeInfo,
  type Viability,
  VIABLE,
  hostIdentity,
  notViable,
} from "@tensorpipe/core/backend";
import { cudaInfo } from "@tensorpipe/cuda";
import { CudaIpcChannel } from "./channel.js";
import { ANSWERS_EXTENSION } from "./ipc-request.js";
import { loadAddon } from "./native.js";

let nextContextId = 1;

/** "<boot id>/<GPU uuid>" -> its two parts. */
function splitDescriptor(descriptor: string): { host: string; uuid: string } | undefined {
  const at = descriptor.lastIndexOf("/");
  if (at <= 0 || at === descriptor.length - 1) return undefined;
  return { host: descriptor.slice(0, at), uuid: descriptor.slice(at + 1) };
}

/**
 * GPU tensors between processes of one machine, copied device to device
 * with CUDA IPC. Each GPU's descriptor names the machine's boot and the GPU's
 * UUID; a pair of GPUs is served only where both are visible here and each
 * can reach the other, otherwise it is left to another channel.
 */
export class CudaIpcChannelContext implements ChannelContext {
  private readonly id = nextContextId++;

  /** Whether the channel can work here, and if not why. */
  isViable(): Viability {
    const { addon, error } = loadAddon();
    if (!addon) return notViable(`the cuda-ipc addon did not load: ${error?.message}`);
    const { viability, devices } = cudaInfo();
    if (!viability.viable) return viability;
    return devices.length > 0 ? VIABLE : notViable("the CUDA driver sees no GPU");
  }

  deviceDescriptors(): readonly DeviceDescriptor[] {
    if (!this.isViable().viable) return [];
    // The same boot of the same machine; CUDA itself decides about containers.
    const host = hostIdentity().bootId;
    return cudaInfo().devices.map((d) => ({ device: { type: "cuda", index: d.index }, descriptor: `${host}/${d.uuid}` }));
  }

  /** How many transport connections each channel needs. */
  numConnectionsNeeded(): number {
    return 1;
  }

  canCommunicateWithRemote(localDescriptor: string, remoteDescriptor: string): boolean {
    const local = splitDescriptor(localDescriptor);
    const remote = splitDescriptor(remoteDescriptor);
    const addon = loadAddon().addon;
    if (!local || !remote || local.host !== remote.host || !addon) return false;
    try {
      const l = addon.deviceOfUuid(local.uuid);
      const r = addon.deviceOfUuid(remote.uuid);
      return l >= 0 && r >= 0 && addon.canAccessPeer(l, r) && addon.canAccessPeer(r, l);
    } catch {
      // Not viable for this pair, never an exception.
      return false;
    }
  }

  /** Between two ends that say so, a message's answers go back as one counted frame. */
  wireExtension(): string {
    return ANSWERS_EXTENSION;
  }

  createChannel(connections: readonly Connection[], _endpoint?: Endpoint, pipe?: PipeInfo): Channel {
    return new CudaIpcChannel(connections[0]!, loadAddon().addon!, this.id, pipe?.peerWireExtension === ANSWERS_EXTENSION);
  }

  /** Releases what the backend holds; called by Context.close(). */
  async close(): Promise<void> {
    loadAddon().addon?.closeImported(this.id);
  }
}

/** Options of the cuda-ipc channel: none yet (for the same shape as every backend's). */
// biome-ignore lint/suspicious/noEmptyInterface: every backend takes options; this one's are to come.
export interface CudaIpcChannelOptions {}
