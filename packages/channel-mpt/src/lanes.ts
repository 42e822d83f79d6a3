/** Where an mpt channel's large tensors go: several lanes, chunks placed by their headers (chunks.ts). */
export interface BulkLanes {
  /** Sends `bytes` striped over the lanes; resolves when they may be reused. */
  send(bytes: Uint8Array): Promise<void>;
  /** Receives into `bytes` from the lanes; resolves when every chunk landed. */
  recv(bytes: Uint8Array): Promise<void>;
  /** Closes every lane; pending transfers reject with `error` (or ERR_TP_CLOSED). */
  close(error?: Error): void;
  /** "threads" (native lanes) or "event loop" (frames through the transport). */
  readonly kind: string;
}
