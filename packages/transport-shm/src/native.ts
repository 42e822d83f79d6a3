import { type NativeFrameConnection, nativeAddonLoader } from "@tensorpipe/core";

export interface NativeShmOptions {
  ringSize?: number;
  allowOtherUsers?: boolean;
  spinMicros?: number;
}

type ConnectionCallback = (err: Error | null, connection?: NativeFrameConnection) => void;

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  ShmListener: new (
    name: string,
    options: NativeShmOptions,
    onConnection: ConnectionCallback,
  ) => { address(): string; close(): void };
  connect(name: string, options: NativeShmOptions, callback: ConnectionCallback): NativeFrameConnection;
  /** null when shared memory works here, else why not. */
  probe(): string | null;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_shm");
