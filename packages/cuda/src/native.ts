import { nativeAddonLoader } from "@tensorpipe/core/backend";

/** A GPU the driver reports. */
export interface CudaDeviceInfo {
  /** Its CUDA device index. */
  index: number;
  /** Its product name. */
  name: string;
  /** Its PCI bus id ("0000:3b:00.0"). */
  pciBusId: string;
  /** The GPU's UUID, 32 hex digits. */
  uuid: string;
}

/** The allocation holding a device pointer. */
export interface CudaAllocation {
  /** The allocation's first byte. */
  base: bigint;
  /** Its bytes. */
  size: number;
  /** The driver's process-wide id of the allocation: a new one at a freed one's address gets a new id. */
  bufferId: bigint;
}

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  probe(): { reason: string | null; driverVersion?: number; devices: CudaDeviceInfo[] };
  alloc(device: number, bytes: number): bigint;
  free(device: number, ptr: bigint): void;
  allocHost(bytes: number): ArrayBuffer;
  pointerDevice(ptr: bigint): number;
  allocationOf(device: number, ptr: bigint): CudaAllocation;
  streamCreate(device: number): bigint;
  streamDestroy(device: number, stream: bigint): void;
  copy(
    kind: "htod" | "dtoh" | "dtod" | "fill" | "ready",
    device: number,
    dst: bigint | ArrayBufferView,
    src: bigint | ArrayBufferView | number,
    bytes: number,
    stream: bigint,
    callback: (err: Error | null) => void,
  ): void;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_cuda");
