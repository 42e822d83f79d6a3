import { createRequire } from "node:module";
import type { NativeFrameConnection as NativeConnection } from "@tensorpipe/core";

export type { NativeConnection };

export interface NativeListener {
  address(): string;
  close(): void;
}

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  UvListener: new (
    host: string,
    port: number,
    onConnection: (err: Error | null, connection?: NativeConnection) => void,
  ) => NativeListener;
  connect(
    host: string,
    port: number,
    bindHost: string | null,
    callback: (err: Error | null, connection?: NativeConnection) => void,
  ): NativeConnection;
}

let loaded: { addon?: NativeAddon; error?: Error } | undefined;

/** Loads the addon once; a missing or broken build is reported, not thrown. */
export function loadAddon(): { addon?: NativeAddon; error?: Error } {
  if (!loaded) {
    try {
      const require = createRequire(import.meta.url);
      loaded = { addon: require("../build/Release/tensorpipe_uv.node") as NativeAddon };
    } catch (e) {
      loaded = { error: e as Error };
    }
  }
  return loaded;
}
