import { nativeAddonLoader } from "@tensorpipe/core";

export interface CudaDeviceInfo {
  index: number;
  name: string;
  pciBusId: string;
  /** The GPU's UUID, 32 hex digits. */
  uuid: string;
}

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  probe(): { reason: string | null; driverVersion?: number; devices: CudaDeviceInfo[] };
  alloc(device: number, bytes: number): bigint;
  free(device: number, ptr: bigint): void;
  allocHost(bytes: number): ArrayBuffer;
  pointerDevice(ptr: bigint): number;
  streamCreate(device: number): bigint;
  streamDestroy(device: number, stream: bigint): void;
  copy(
    kind: "htod" | "dtoh" | "dtod" | "fill",
    device: number,
    dst: bigint | ArrayBufferView,
    src: bigint | ArrayBufferView | number,
    bytes: number,
    stream: bigint,
    callback: (err: Error | null) => void,
  ): void;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_cuda");
