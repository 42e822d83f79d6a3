import { nativeAddonLoader } from "@tensorpipe/core/backend";

/** A port of an RDMA device, as probed. */
export interface ProbedPort {
  /** Its number (from 1). */
  port: number;
  /** "active", "down", ... */
  state: string;
  /** "InfiniBand" or "Ethernet" (RoCE). */
  linkLayer: string;
  /** Its local id (InfiniBand). */
  lid: number;
  /** The MTU in use, in bytes. */
  activeMtu: number;
  /** The largest message it sends, in bytes. */
  maxMsgSize: number;
}

/** An RDMA device, as probed. */
export interface ProbedDevice {
  /** Its name ("mlx5_0"). */
  name: string;
  /** Its ports. */
  ports: ProbedPort[];
  /** Why the device could not be opened, if it could not. */
  error?: string;
}

/** One opened device port's address, what the peer needs to reach a queue pair on it. */
export interface NicAddress {
  /** The port used. */
  port: number;
  /** The GID table index used (RoCE). */
  gidIndex: number;
  /** The port's local id (InfiniBand). */
  lid: number;
  /** The port's GID (16 bytes). */
  gid: Uint8Array;
  /** ibv_mtu enum value (1 = 256 bytes ... 5 = 4096). */
  mtu: number;
  /** The largest message it sends, in bytes. */
  maxMsgSize: number;
  /** "InfiniBand" or "Ethernet" (RoCE). */
  linkLayer: string;
}

/** native/addon.cc's IbvNic: one RDMA device port, its protection domain and completion queue. */
export interface NativeNic {
  address(): NicAddress;
  createQueuePair(maxSends: number, maxRecvs: number): { id: number; qpn: number };
  connectQueuePair(id: number, remote: { lid: number; gid: Uint8Array; qpn: number; mtu: number }): void;
  destroyQueuePair(id: number): void;
  registerMemory(ptr: bigint, length: number): { id: number; lkey: number };
  deregisterMemory(id: number): void;
  postSend(qp: number, ptr: bigint, length: number, lkey: number, wrId: number): void;
  postRecv(qp: number, ptr: bigint, length: number, lkey: number, wrId: number): void;
  statusText(status: number): string;
  close(): void;
}

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  probe(): { reason: string | null; devices: ProbedDevice[] };
  /** Absent where the addon was built without <infiniband/verbs.h>. */
  IbvNic?: new (
    device: string,
    port: number,
    gidIndex: number,
    completionQueueSize: number,
    onCompletions: (wrIds: number[], statuses: number[]) => void,
  ) => NativeNic;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_cuda_gdr");
