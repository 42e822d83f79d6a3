import { nativeAddonLoader } from "@tensorpipe/core/backend";

export interface ExportedTensor {
  /** The IPC handle of the allocation that holds the tensor. */
  memHandle: Uint8Array;
  /** The tensor's offset in that allocation. */
  offset: number;
  /** Whether the work queued on the tensor's stream was done (else wait for the stream). */
  ready: boolean;
}

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  deviceOfUuid(uuid: string): number;
  canAccessPeer(a: number, b: number): boolean;
  exportTensor(device: number, ptr: bigint, stream: bigint): ExportedTensor;
  importCopy(
    context: number,
    device: number,
    memHandle: Uint8Array,
    offset: number,
    dst: bigint,
    bytes: number,
    stream: bigint,
    callback: (err: Error | null) => void,
  ): void;
  closeImported(context: number): void;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_cuda_ipc");
