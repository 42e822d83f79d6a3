/**
 * A context's metrics as OpenTelemetry instruments on a Meter the
 * application gives (from its MeterProvider): its counters, observed at
 * each collection, and histograms of tensor sizes and message durations
 * per channel. Names and attributes follow OpenTelemetry's conventions:
 * dotted names, units ("By", "s", "{message}"), `network.io.direction`
 * ("transmit", "receive") and `error.type`.
 */
import type { Attributes, Meter, ObservableResult } from "@opentelemetry/api";
import { type Context, ErrorCode, TensorPipeError } from "@tensorpipe/core";
import { DEFAULT_DURATION_BUCKETS, DEFAULT_SIZE_BUCKETS, type Direction, MessageObserver, type MetricsOptions, channelLabel } from "./observer.js";

export { DEFAULT_DURATION_BUCKETS, DEFAULT_SIZE_BUCKETS, type MetricsOptions } from "./observer.js";

/** The instruments of one context on a meter; close() stops them. */
export interface OpenTelemetryMetrics {
  /** Stops observing the context: its observable instruments report nothing more. */
  close(): void;
}

const IO: Record<Direction, string> = { sent: "transmit", received: "receive" };

/** Options of openTelemetryMetrics(). */
export interface OpenTelemetryOptions extends MetricsOptions {
  /** Carried by every observation: what tells contexts on one Meter apart. */
  readonly attributes?: Attributes;
}

// Which contexts each Meter has instruments for: twice would count twice.
const exportedOn = new WeakMap<Meter, WeakSet<Context>>();

/**
 * Creates on `meter`, for `context`:
 *
 * - `tensorpipe.pipes.opened` (counter), `tensorpipe.pipes.open` (up-down counter);
 * - `tensorpipe.messages` and `tensorpipe.io` (bytes) by `network.io.direction`;
 * - `tensorpipe.channel.tensors` and `tensorpipe.channel.io` by `tensorpipe.channel` and `network.io.direction`;
 * - `tensorpipe.errors` by `error.type` (the code), `tensorpipe.listener.dropped_connections` by `error.type`;
 * - histograms `tensorpipe.tensor.size` (By) and `tensorpipe.message.duration` (s) by `tensorpipe.channel` and `network.io.direction`.
 */
export function openTelemetryMetrics(context: Context, meter: Meter, options: OpenTelemetryOptions = {}): OpenTelemetryMetrics {
  const exported = exportedOn.get(meter) ?? new WeakSet<Context>();
  if (exported.has(context)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, "this context's metrics are on this Meter already: close() the first before exporting it again");
  }
  exported.add(context);
  exportedOn.set(meter, exported);
  const own: Attributes = { ...options.attributes };
  let open = true;
  const observe = (name: string, kind: "counter" | "updown", description: string, unit: string, report: (r: ObservableResult<Attributes>) => void) => {
    const instrument = kind === "counter" ? meter.createObservableCounter(name, { description, unit }) : meter.createObservableUpDownCounter(name, { description, unit });
    instrument.addCallback((r) => {
      if (open) report(r);
    });
  };
  const both = (r: ObservableResult<Attributes>, sent: number, received: number, attributes: Attributes = {}) => {
    r.observe(sent, { ...own, ...attributes, "network.io.direction": IO.sent });
    r.observe(received, { ...own, ...attributes, "network.io.direction": IO.received });
  };
  observe("tensorpipe.pipes.opened", "counter", "Pipes the context opened or accepted.", "{pipe}", (r) => r.observe(context.stats().pipesOpened, own));
  observe("tensorpipe.pipes.open", "updown", "Pipes of the context still open.", "{pipe}", (r) => r.observe(context.stats().pipesOpen, own));
  observe("tensorpipe.messages", "counter", "Messages written (taken by write()) and read (given memory by read()).", "{message}", (r) => {
    const s = context.stats();
    both(r, s.messagesSent, s.messagesReceived);
  });
  observe("tensorpipe.io", "counter", "Payload and tensor bytes (descriptors and framing not counted).", "By", (r) => {
    const s = context.stats();
    both(r, s.bytesSent, s.bytesReceived);
  });
  observe("tensorpipe.channel.tensors", "counter", "Tensors by the channel that carried them.", "{tensor}", (r) => {
    for (const [channel, c] of Object.entries(context.stats().channels)) both(r, c.tensorsSent, c.tensorsReceived, { "tensorpipe.channel": channel });
  });
  observe("tensorpipe.channel.io", "counter", "Tensor bytes by the channel that carried them.", "By", (r) => {
    for (const [channel, c] of Object.entries(context.stats().channels)) both(r, c.bytesSent, c.bytesReceived, { "tensorpipe.channel": channel });
  });
  observe("tensorpipe.errors", "counter", "Errors that ended pipes, and operations refused, by code.", "{error}", (r) => {
    for (const [code, n] of Object.entries(context.stats().errors)) r.observe(n, { ...own, "error.type": code });
  });
  observe("tensorpipe.listener.dropped_connections", "counter", "Connections the context's listeners dropped before they became pipes, by code.", "{connection}", (r) => {
    for (const [code, n] of Object.entries(context.stats().connectionErrors)) r.observe(n, { ...own, "error.type": code });
  });
  const sizes = meter.createHistogram("tensorpipe.tensor.size", {
    description: "Bytes of each tensor written or read, by channel.",
    unit: "By",
    advice: { explicitBucketBoundaries: [...(options.sizeBuckets ?? DEFAULT_SIZE_BUCKETS)] },
  });
  const durations = meter.createHistogram("tensorpipe.message.duration", {
    description: "From write() or read() until the message's bytes left or landed, by the channel of its first tensor.",
    unit: "s",
    advice: { explicitBucketBoundaries: [...(options.durationBuckets ?? DEFAULT_DURATION_BUCKETS)] },
  });
  const observer = new MessageObserver(context, {
    tensor: (direction, channel, bytes) => sizes.record(bytes, { ...own, "tensorpipe.channel": channelLabel(channel), "network.io.direction": IO[direction] }),
    message: (direction, channel, seconds) => durations.record(seconds, { ...own, "tensorpipe.channel": channelLabel(channel), "network.io.direction": IO[direction] }),
  });
  return {
    close() {
      open = false;
      observer.close();
      exported.delete(context);
    },
  };
}
