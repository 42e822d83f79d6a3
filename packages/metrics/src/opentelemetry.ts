/**
 * A context's metrics as OpenTelemetry instruments on a Meter the
 * application gives (from its MeterProvider): its counters, observed at
 * each collection, and histograms of tensor sizes and message durations
 * per channel. Names and attributes follow OpenTelemetry's conventions:
 * dotted names, units ("By", "s", "{message}"), `network.io.direction`
 * ("transmit", "receive") and `error.type`.
 */
import type { Attributes, Meter } from "@opentelemetry/api";
import { type Context, ErrorCode, TensorPipeError } from "@tensorpipe/core";
import { type Direction, MessageObserver, type MetricsOptions, channelLabel, histogramBuckets } from "./observer.js";
import { HISTOGRAMS, STATS_METRICS, type StatPoint } from "./stats-metrics.js";

export type { MetricsOptions } from "./observer.js";

/** The instruments of one context on a meter; close() stops them. */
export interface OpenTelemetryMetrics {
  /** Stops observing the context: its observable instruments report nothing more. */
  close(): void;
}

const IO: Record<Direction, string> = { sent: "transmit", received: "receive" };

/** Options of openTelemetryMetrics(). */
export interface OpenTelemetryOptions extends MetricsOptions {
  /** Carried by every observation: what tells contexts on one Meter apart. */
  readonly attributes?: Attributes | undefined;
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
  const buckets = histogramBuckets(options);
  const exported = exportedOn.get(meter) ?? new WeakSet<Context>();
  if (exported.has(context)) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, "this context's metrics are on this Meter already: close() the first before exporting it again");
  }
  exported.add(context);
  exportedOn.set(meter, exported);
  const own: Attributes = { ...options.attributes };
  let open = true;
  const attributesOf = (point: StatPoint): Attributes => ({
    ...own,
    ...(point.channel === undefined ? {} : { "tensorpipe.channel": point.channel }),
    ...(point.direction === undefined ? {} : { "network.io.direction": IO[point.direction] }),
    ...(point.code === undefined ? {} : { "error.type": point.code }),
  });
  for (const m of STATS_METRICS) {
    const described = { description: m.help, unit: m.unit };
    const instrument =
      m.kind === "counter" ? meter.createObservableCounter(m.opentelemetry, described) : meter.createObservableUpDownCounter(m.opentelemetry, described);
    instrument.addCallback((r) => {
      if (!open) return;
      for (const point of m.read(context.stats())) r.observe(point.value, attributesOf(point));
    });
  }
  const histogram = (h: (typeof HISTOGRAMS)[keyof typeof HISTOGRAMS], buckets: readonly number[]) =>
    meter.createHistogram(h.opentelemetry, { description: h.help, unit: h.unit, advice: { explicitBucketBoundaries: [...buckets] } });
  const sizes = histogram(HISTOGRAMS.size, buckets.sizes);
  const durations = histogram(HISTOGRAMS.duration, buckets.durations);
  const observer = new MessageObserver(context, {
    tensor: (direction, channel, bytes) => sizes.record(bytes, { ...own, "tensorpipe.channel": channelLabel(channel), "network.io.direction": IO[direction] }),
    message: (direction, channel, seconds) =>
      durations.record(seconds, { ...own, "tensorpipe.channel": channelLabel(channel), "network.io.direction": IO[direction] }),
  });
  return {
    close() {
      open = false;
      observer.close();
      exported.delete(context);
    },
  };
}
