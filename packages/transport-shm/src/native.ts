import { type NativeFrameConnection, nativeAddonLoader } from "@tensorpipe/core/backend";

export interface NativeShmOptions {
  ringSize?: number;
  allowOtherUsers?: boolean;
  spinMicros?: number;
}

/** The bounds on the handshake of a listener's connections; 0 leaves one off. */
export interface NativeHandshakeBounds {
  handshakeTimeout: number;
  maxPendingHandshakes: number;
}

type ConnectionCallback = (err: Error | null, connection?: NativeFrameConnection) => void;

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  ShmListener: new (
    name: string,
    options: NativeShmOptions,
    onConnection: ConnectionCallback,
    bounds: NativeHandshakeBounds,
  ) => { address(): string; close(): void };
  connect(name: string, options: NativeShmOptions, callback: ConnectionCallback): NativeFrameConnection;
  /** null when shared memory works here, else why not. */
  probe(): string | null;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_shm");
