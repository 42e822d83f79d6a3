/**
 * A context's metrics in a prom-client registry, read when it is scraped:
 * its counters (context.stats()) and histograms of tensor sizes and message
 * durations per channel. Names follow Prometheus' conventions: a prefix,
 * base units (bytes, seconds), `_total` on counters.
 */
import type { Context } from "@tensorpipe/core";
import { Counter, Gauge, Histogram, type Registry, register as defaultRegistry } from "prom-client";
import { MessageObserver, type MetricsOptions, channelLabel, histogramBuckets } from "./observer.js";
import { HISTOGRAMS, STATS_METRICS, type StatPoint } from "./stats-metrics.js";

export type { MetricsOptions } from "./observer.js";

/** Options of prometheusMetrics(). */
export interface PrometheusOptions extends MetricsOptions {
  /** Where the metrics go (default: prom-client's global registry). */
  readonly registry?: Registry | undefined;
  /** Put before every name (default "tensorpipe_"). */
  readonly prefix?: string | undefined;
}

/** A point's labels as Prometheus takes them, in the metric's order. */
function labelsOf(point: StatPoint): Record<string, string> {
  const out: Record<string, string> = {};
  if (point.channel !== undefined) out.channel = point.channel;
  if (point.direction !== undefined) out.direction = point.direction;
  if (point.code !== undefined) out.code = point.code;
  return out;
}

/** The metrics of one context in a registry; close() takes them out again. */
export interface PrometheusMetrics {
  /** Stops observing the context and removes its metrics from the registry. */
  close(): void;
}

/**
 * Registers the metrics of `context` in `options.registry`:
 *
 * - `tensorpipe_pipes_opened_total`, `tensorpipe_pipes_open`;
 * - `tensorpipe_messages_total`, `tensorpipe_bytes_total` by `direction` ("sent", "received");
 * - `tensorpipe_channel_tensors_total`, `tensorpipe_channel_bytes_total` by `channel` and `direction`;
 * - `tensorpipe_errors_total` by `code`, `tensorpipe_listener_dropped_connections_total` by `code`;
 * - histograms `tensorpipe_tensor_size_bytes` and `tensorpipe_message_duration_seconds` by `channel` and `direction`.
 *
 * A registry takes one context's metrics under one prefix (prom-client refuses a name twice): give another context a prefix or a registry of its own.
 */
export function prometheusMetrics(context: Context, options: PrometheusOptions = {}): PrometheusMetrics {
  const buckets = histogramBuckets(options);
  const registry = options.registry ?? defaultRegistry;
  const p = options.prefix ?? "tensorpipe_";
  const registers = [registry];
  const names: string[] = [];
  for (const m of STATS_METRICS) {
    names.push(p + m.prometheus);
    const labelNames = [...m.labels];
    if (m.kind === "gauge") {
      new Gauge({
        name: p + m.prometheus,
        help: m.help,
        labelNames,
        registers,
        collect() {
          for (const point of m.read(context.stats())) this.set(labelsOf(point), point.value);
        },
      });
    } else {
      new Counter({
        name: p + m.prometheus,
        help: m.help,
        labelNames,
        registers,
        collect() {
          this.reset();
          for (const point of m.read(context.stats())) this.inc(labelsOf(point), point.value);
        },
      });
    }
  }
  const histogram = (h: (typeof HISTOGRAMS)[keyof typeof HISTOGRAMS], buckets: readonly number[]) => {
    names.push(p + h.prometheus);
    return new Histogram({ name: p + h.prometheus, help: h.help, labelNames: ["channel", "direction"], buckets: [...buckets], registers });
  };
  const sizes = histogram(HISTOGRAMS.size, buckets.sizes);
  const durations = histogram(HISTOGRAMS.duration, buckets.durations);
  const observer = new MessageObserver(context, {
    tensor: (direction, channel, bytes) => sizes.observe({ channel: channelLabel(channel), direction }, bytes),
    message: (direction, channel, seconds) => durations.observe({ channel: channelLabel(channel), direction }, seconds),
  });
  return {
    close() {
      observer.close();
      for (const name of names) registry.removeSingleMetric(name);
    },
  };
}
