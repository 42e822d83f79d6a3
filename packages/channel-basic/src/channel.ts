import { type Channel, type Connection, DONE, type TensorBuffer, cpuBytes, writeFrame } from "@tensorpipe/core/backend";

/**
 * One end of a basic channel: each tensor is one frame on its own transport
 * connection, written from and read into the user's memory by the transport.
 * A zero-length tensor is no frame at all, on either end: upstream's basic
 * channel completes it at once, and a frame of 0 bytes would put the two
 * ends out of step with a C++ peer.
 */
export class BasicChannel implements Channel {
  constructor(private readonly connection: Connection) {}

  /** Sends the first `length` bytes of `buffer`; resolves when the buffer may be reused. */
  send(buffer: TensorBuffer, length: number): Promise<void> {
    if (length === 0) return DONE;
    try {
      return writeFrame(this.connection, cpuBytes(buffer, length, "basic"));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Receives `length` bytes into `buffer`; resolves when they have landed. */
  recv(buffer: TensorBuffer, length: number): Promise<void> {
    if (length === 0) return DONE;
    try {
      return this.connection.readInto(cpuBytes(buffer, length, "basic"));
    } catch (e) {
      return Promise.reject(e);
    }
  }

  /** Ends the channel; pending sends and receives reject with `error` (or ERR_TP_CLOSED). */
  close(error?: Error): void {
    this.connection.close(error);
  }
}
