/**
 * One write() as it goes out, upstream's WriteOperation: its descriptor
 * and payloads go on the main connection at once; its tensors go to their
 * channels in message order, once the peer has named the devices of those
 * it was to pick (a DescriptorReply) and every earlier write's tensors are
 * with their channels:
 *
 *   targets awaited ──reply──▶ queued ──earlier ones handed over──▶ sending ──▶ done
 *          └───────────────────────┴──────── the pipe fails ──────────────────▶ failed
 */
import { Deferred } from "../deferred.js";
import type { Device } from "../device.js";
import type { MessageTensor } from "../message.js";

/** Where a write's tensors stand. */
export type WriteState = "targets awaited" | "queued" | "sending" | "done" | "failed";

/** The tensors of one write that could not go to their channels at once. */
export class WriteOperation {
  state: WriteState;
  /** The devices the peer picked for the tensors it was to, in order. */
  private picked?: readonly Device[];
  private readonly handedOver = new Deferred<void>();
  /** Settles once the tensors are with their channels and those have sent them. */
  readonly done: Promise<void> = this.handedOver.promise;

  constructor(
    readonly tensors: readonly MessageTensor[],
    /** How many of them the peer picks a device for. */
    readonly missingTargets: number,
  ) {
    this.state = missingTargets > 0 ? "targets awaited" : "queued";
  }

  /** The devices the peer picked. */
  get replyDevices(): readonly Device[] | undefined {
    return this.picked;
  }

  /** targets awaited -> queued: the peer's DescriptorReply named them. */
  targetsCame(devices: readonly Device[]): void {
    this.picked = devices;
    this.state = "queued";
  }

  /** queued -> sending: handed to their channels, `sent` settling when they are sent. */
  sending(sent: Promise<void>): void {
    this.state = "sending";
    sent.then(
      () => (this.state = "done"),
      () => (this.state = "failed"),
    );
    this.handedOver.resolve(sent);
  }

  /** -> failed, with the pipe's error. */
  fail(err: unknown): void {
    this.state = "failed";
    this.handedOver.reject(err);
  }
}
