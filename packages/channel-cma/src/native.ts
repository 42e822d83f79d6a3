import { createRequire } from "node:module";

/** The addon's surface, as native/addon.cc defines it. */
export interface NativeAddon {
  readv(
    pid: number,
    remoteAddress: bigint,
    length: number,
    target: ArrayBufferView,
    parallelism: number,
    hugePages: boolean,
    callback: (err: Error | null) => void,
  ): void;
  /** With hugePages, large views are turned into 2 MiB pages later, off the loop. */
  addressOf(view: ArrayBufferView, hugePages: boolean): bigint;
  /** null when process_vm_readv works here, else why not. */
  probe(): string | null;
}

let loaded: { addon?: NativeAddon; error?: Error } | undefined;

export function loadAddon(): { addon?: NativeAddon; error?: Error } {
  if (!loaded) {
    try {
      const require = createRequire(import.meta.url);
      loaded = { addon: require("../build/Release/tensorpipe_cma.node") as NativeAddon };
    } catch (e) {
      loaded = { error: e as Error };
    }
  }
  return loaded;
}
