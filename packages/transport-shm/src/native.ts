import { createRequire } from "node:module";
import type { NativeFrameConnection } from "@tensorpipe/core";

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

let loaded: { addon?: NativeAddon; error?: Error } | undefined;

export function loadAddon(): { addon?: NativeAddon; error?: Error } {
  if (!loaded) {
    try {
      const require = createRequire(import.meta.url);
      loaded = { addon: require("../build/Release/tensorpipe_shm.node") as NativeAddon };
    } catch (e) {
      loaded = { error: e as Error };
    }
  }
  return loaded;
}
