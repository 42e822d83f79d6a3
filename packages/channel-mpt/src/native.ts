import { nativeAddonLoader } from "@tensorpipe/core/backend";

/** Bulk lanes on their own threads, as native/lane_set.cc defines them. */
export interface NativeLaneSet {
  send(view: Uint8Array, length: number, id: number): void;
  recv(view: Uint8Array, length: number, id: number): void;
  close(): void;
}

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  LaneSet: new (
    fds: number[],
    readAhead: Uint8Array[],
    maxChunk: number,
    /** TCP_NOTSENT_LOWAT for every lane, or 0 to leave the kernel's. */
    unsentLimit: number,
    /** (id, null): operation `id` is done; (-1, err): the lanes failed. */
    onEvent: (id: number, err: Error | null) => void,
  ) => NativeLaneSet;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_mpt");
