import { type NativeFrameConnection, nativeAddonLoader } from "@tensorpipe/core/backend";

export interface NativeListener {
  address(): string;
  close(): void;
}

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  UvListener: new (
    host: string,
    port: number,
    peerTimeoutMs: number,
    onConnection: (err: Error | null, connection?: NativeFrameConnection) => void,
  ) => NativeListener;
  connect(
    host: string,
    port: number,
    bindHost: string | null,
    peerTimeoutMs: number,
    callback: (err: Error | null, connection?: NativeFrameConnection) => void,
  ): NativeFrameConnection;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_uv");
