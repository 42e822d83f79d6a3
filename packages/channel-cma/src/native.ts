import { nativeAddonLoader } from "@tensorpipe/core/backend";

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
  /** A pidfd for `pid` (-1 where the kernel has none); ERR_TP_PERMISSION_DENIED when no such process. */
  pinProcess(pid: number): number;
  /** Whether the process a pidfd names has exited. */
  processExited(pidfd: number): boolean;
  /** Closes a pidfd from pinProcess. */
  unpinProcess(pidfd: number): void;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_cma");
