/**
 * What both exporters draw on: one context's messages, from the library's
 * diagnostics channels (which every context in the process shares, so only
 * this context's pipes are kept), and the buckets of their histograms.
 */
import { type Context, ErrorCode, type MessageDoneMessage, type MessageSizesMessage, TensorPipeError, diagnostics } from "@tensorpipe/core";

/** Bytes each way, as both exporters label them. */
export type Direction = "sent" | "received";

/** Options both exporters take. */
export interface MetricsOptions {
  /** Upper bounds of the tensor size histogram, in bytes (default: 64 B to 1 GiB, by 16x). */
  readonly sizeBuckets?: readonly number[] | undefined;
  /** Upper bounds of the message duration histogram, in seconds (default: 10 us to 10 s). */
  readonly durationBuckets?: readonly number[] | undefined;
}

/** Tensor sizes: 64 B, 1 KiB, 16 KiB, 256 KiB, 4 MiB, 64 MiB, 1 GiB. */
export const DEFAULT_SIZE_BUCKETS: readonly number[] = [64, 1024, 16384, 262144, 4194304, 67108864, 1073741824];
/** Message durations, from a small message over shm to a large one over TCP. */
export const DEFAULT_DURATION_BUCKETS: readonly number[] = [
  1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
];

/** The histograms' bounds: the user's, checked (a bad list would only fail later, in the metrics library, or skew every figure), or the defaults. */
export function histogramBuckets(options: MetricsOptions): { sizes: readonly number[]; durations: readonly number[] } {
  return {
    sizes: checkBuckets("sizeBuckets", options.sizeBuckets, DEFAULT_SIZE_BUCKETS),
    durations: checkBuckets("durationBuckets", options.durationBuckets, DEFAULT_DURATION_BUCKETS),
  };
}

function checkBuckets(name: string, value: unknown, defaults: readonly number[]): readonly number[] {
  if (value === undefined) return defaults;
  const list = Array.isArray(value) ? (value as unknown[]) : [];
  const increasing = list.every((b, i) => typeof b === "number" && Number.isFinite(b) && b > 0 && (i === 0 || b > (list[i - 1] as number)));
  if (list.length === 0 || !increasing) {
    throw new TensorPipeError(
      ErrorCode.INVALID_ARG,
      `${name} must be a non-empty array of finite upper bounds above 0, each larger than the one before (e.g. [${defaults.slice(0, 3).join(", ")}, ...]); got ${described(value)}`,
    );
  }
  return list as number[];
}

/** A bucket list as given, briefly, whatever it holds: numbers as numbers, the first few, anything else by its type. */
function described(value: unknown): string {
  if (!Array.isArray(value)) return value === null ? "null" : typeof value;
  const shown = value.slice(0, 6).map((b: unknown) => (typeof b === "number" ? String(b) : typeof b));
  return `[${shown.join(", ")}${value.length > 6 ? `, ... (${value.length})` : ""}]`;
}

/** Where the observer hands what it sees. */
export interface MessageSink {
  /** A tensor of `bytes` went out or was given memory to come in over `channel`. */
  tensor(direction: Direction, channel: string, bytes: number): void;
  /** A message finished, `seconds` after it was written or read; `channel` is its first tensor's ("" for none). */
  message(direction: Direction, channel: string, seconds: number): void;
}

/** The channel label of a tensor or message: "none" where no channel carried it (yet). */
export function channelLabel(channel: string): string {
  return channel === "" ? "none" : channel;
}

/** Watches `context`'s messages until closed. */
export class MessageObserver {
  private readonly onWrite = (m: MessageSizesMessage) => this.sizes("sent", m);
  private readonly onRead = (m: MessageSizesMessage) => this.sizes("received", m);
  private readonly onDone = (m: MessageDoneMessage) => {
    if (this.context.ownsPipe(m.pipe)) this.sink.message(m.direction === "write" ? "sent" : "received", m.channel, m.seconds);
  };

  constructor(
    private readonly context: Context,
    private readonly sink: MessageSink,
  ) {
    diagnostics.messageWrite.subscribe(this.onWrite);
    diagnostics.messageRead.subscribe(this.onRead);
    diagnostics.messageDone.subscribe(this.onDone);
  }

  private sizes(direction: Direction, m: MessageSizesMessage): void {
    if (!this.context.ownsPipe(m.pipe)) return;
    for (const t of m.tensors) this.sink.tensor(direction, t.channel, t.length);
  }

  /** Stops watching: the library then builds no message for these channels (unless others listen). */
  close(): void {
    diagnostics.messageWrite.unsubscribe(this.onWrite);
    diagnostics.messageRead.unsubscribe(this.onRead);
    diagnostics.messageDone.unsubscribe(this.onDone);
  }
}
