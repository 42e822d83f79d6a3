import { existsSync } from "node:fs";
import { type Channel, type ChannelContext, type Connection, type DeviceDescriptor, type Viability, VIABLE, notViable } from "@tensorpipe/core/backend";
import { type CudaDeviceInfo, cudaInfo } from "@tensorpipe/cuda";
import { CudaGdrChannel, type NicSet } from "./channel.js";
import { type ProbedDevice, loadAddon } from "./native.js";
import { Nic } from "./nic.js";
import { closestNics, pciPathOfBusId, pciPathOfRdmaDevice } from "./nic-affinity.js";

/** Options of the cuda-gdr channel. */
export interface CudaGdrChannelOptions {
  /** RDMA devices to use, by name ("mlx5_0"); default: every one with an active port. */
  devices?: readonly string[] | undefined;
  /** GID table entry to address ports by (RoCE needs the right one; default 0). */
  gidIndex?: number | undefined;
  /**
   * Whether viability requires the kernel module that lets NICs reach GPU
   * memory (nvidia-peermem or nv_peer_mem; default true). False where
   * something else provides it: memory registration then says whether it
   * works.
   */
  peerMemoryCheck?: boolean | undefined;
}

/** A port the channel can use: the device's first active one. */
export interface UsablePort {
  /** The RDMA device's name. */
  device: string;
  /** The port's number. */
  port: number;
  /** "InfiniBand" or "Ethernet" (RoCE). */
  linkLayer: string;
}

/** Where the kernel modules that let RDMA devices reach GPU memory show up. */
const PEER_MEMORY_MODULES = ["/sys/module/nvidia_peermem", "/sys/module/nv_peer_mem"];

/**
 * Lists the RDMA ports this process can use, or says why there are none:
 * no libibverbs, no RDMA in the kernel, no device, no active port.
 */
export function rdmaPorts(options: Pick<CudaGdrChannelOptions, "devices"> = {}): {
  /** The ports it can use. */
  ports: UsablePort[];
  /** Why there are none, when there are none. */
  reason?: string;
  /** Every device found, with its ports. */
  devices: ProbedDevice[];
} {
  const { addon, error } = loadAddon();
  if (!addon) return { ports: [], reason: `the cuda-gdr addon did not load: ${error?.message}`, devices: [] };
  const probed = addon.probe();
  if (probed.reason) return { ports: [], reason: `no RDMA: ${probed.reason}`, devices: [] };
  const wanted = options.devices ? probed.devices.filter((d) => options.devices!.includes(d.name)) : probed.devices;
  if (probed.devices.length === 0) return { ports: [], reason: "no InfiniBand or RoCE device here (ibv_get_device_list found none)", devices: [] };
  const missing = options.devices?.filter((name) => !probed.devices.some((d) => d.name === name)) ?? [];
  if (missing.length > 0)
    return { ports: [], reason: `no RDMA device named ${missing.join(", ")} (here: ${probed.devices.map((d) => d.name).join(", ")})`, devices: probed.devices };
  const ports = wanted.flatMap((d) => {
    const active = d.ports.find((p) => p.state === "active");
    return active ? [{ device: d.name, port: active.port, linkLayer: active.linkLayer }] : [];
  });
  if (ports.length === 0) {
    const states = wanted.map((d) =>
      d.error ? `${d.name}: ${d.error}` : `${d.name}: ${d.ports.map((p) => `port ${p.port} ${p.state}`).join(", ") || "no port"}`,
    );
    return { ports, reason: `no RDMA device has an active port (${states.join("; ")})`, devices: probed.devices };
  }
  return { ports, devices: probed.devices };
}

/** The GPUs, and for each the index in `ports` of the NIC closest to it. */
function placement(ports: readonly UsablePort[]): { gpus: CudaDeviceInfo[]; closest: number[] } {
  const gpus = cudaInfo().devices;
  const closest = closestNics(
    gpus.map((g) => pciPathOfBusId(g.pciBusId)),
    ports.map((p) => pciPathOfRdmaDevice(p.device)),
  );
  return { gpus, closest };
}

/**
 * GPU tensors between machines over InfiniBand or RoCE, sent from and
 * received into GPU memory by the NICs themselves (GPUDirect RDMA): no
 * copy through the host. Each GPU uses the NIC closest to it on the PCI
 * tree; one reliable-connection queue pair per pair of NICs per channel.
 */
export class CudaGdrChannelContext implements ChannelContext {
  private opened?: NicSet & { close(): void };
  /** Probed once: every handshake asks isViable() and deviceDescriptors() again. */
  private surveyed?: { viability: Viability; ports: UsablePort[] };

  constructor(private readonly options: CudaGdrChannelOptions = {}) {}

  /** Whether the channel can work here, and if not why. */
  isViable(): Viability {
    return this.survey().viability;
  }

  /** Every GPU, described by the link layer of its NIC: InfiniBand and RoCE ends never pair. */
  deviceDescriptors(): readonly DeviceDescriptor[] {
    const { viability, ports } = this.survey();
    if (!viability.viable) return [];
    const { gpus, closest } = placement(ports);
    return gpus.map((g, i) => ({ device: { type: "cuda", index: g.index }, descriptor: `cuda-gdr/${ports[closest[i]!]!.linkLayer}` }));
  }

  /** Whether the channel can work here, with the ports it would use: one probe of the devices. */
  private survey(): { viability: Viability; ports: UsablePort[] } {
    this.surveyed ??= this.probe();
    return this.surveyed;
  }

  private probe(): { viability: Viability; ports: UsablePort[] } {
    const { ports, reason } = rdmaPorts(this.options);
    if (ports.length === 0) return { viability: notViable(reason!), ports };
    const cuda = cudaInfo();
    if (!cuda.viability.viable) return { viability: cuda.viability, ports };
    if (cuda.devices.length === 0) return { viability: notViable("the CUDA driver sees no GPU"), ports };
    if (this.options.peerMemoryCheck !== false && !PEER_MEMORY_MODULES.some((m) => existsSync(m))) {
      return {
        viability: notViable("RDMA devices cannot reach GPU memory: the nvidia-peermem kernel module is not loaded (modprobe nvidia-peermem)"),
        ports,
      };
    }
    return { viability: VIABLE, ports };
  }

  /** Descriptors of tensors, then ready-to-receive answers (and the handshake). */
  numConnectionsNeeded(): number {
    return 2;
  }

  canCommunicateWithRemote(localDescriptor: string, remoteDescriptor: string): boolean {
    return localDescriptor === remoteDescriptor;
  }

  createChannel(connections: readonly Connection[]): Channel {
    return new CudaGdrChannel(connections[0]!, connections[1]!, this.nics());
  }

  /** The NICs the GPUs use, opened at the first channel and shared by all. */
  private nics(): NicSet {
    if (this.opened) return this.opened;
    const addon = loadAddon().addon!;
    const { ports } = rdmaPorts(this.options);
    const { gpus, closest } = placement(ports);
    // Only the NICs some GPU is closest to, as upstream does.
    const used = [...new Set(closest)];
    const nics = used.map((i) => new Nic(addon, ports[i]!.device, ports[i]!.port, this.options.gidIndex ?? 0));
    const gpuToNic = new Map(gpus.map((g, i) => [g.index, used.indexOf(closest[i]!)]));
    this.opened = {
      nics,
      nicOfGpu: (device) => gpuToNic.get(device) ?? 0,
      close: () => nics.forEach((n) => n.close()),
    };
    return this.opened;
  }

  /** Releases what the backend holds; called by Context.close(). */
  async close(): Promise<void> {
    this.opened?.close();
    this.opened = undefined;
  }
}
