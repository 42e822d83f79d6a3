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
  /** A sealed memfd of `bytes`, mapped here with its pages allocated (sparse: none, for tests): [segment number, fd]. */
  createSegment(bytes: number, sparse?: boolean): [number, number];
  /** The peer's segment `fd`, taken through `pidfd` and mapped when it is a sealed memfd of at most maxBytes: [segment number, bytes]. */
  attachSegment(pidfd: number, fd: number, maxBytes: number): [number, number];
  /** An ArrayBuffer over bytes of a segment; it keeps the segment mapped until collected. */
  viewSegment(segment: number, offset: number, length: number): ArrayBuffer;
  /** Copies bytes of a segment into `target`. */
  copyFromSegment(segment: number, offset: number, length: number, target: ArrayBufferView): void;
  /** Detaches an ArrayBuffer (viewSegment's): its views read as empty. */
  detachBuffer(buffer: ArrayBuffer): void;
  /** Forgets a segment; its mapping goes with its last view. */
  closeSegment(segment: number): void;
  /** null when shared pools work here (memfd, pidfd_getfd), else why not. */
  probeSharedSegments(): string | null;
}

export const loadAddon = nativeAddonLoader<NativeAddon>(import.meta.url, "tensorpipe_cma");
