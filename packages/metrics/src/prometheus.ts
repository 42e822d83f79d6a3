/**
 * A context's metrics in a prom-client registry, read when it is scraped:
 * its counters (context.stats()) and histograms of tensor sizes and message
 * durations per channel. Names follow Prometheus' conventions: a prefix,
 * base units (bytes, seconds), `_total` on counters.
 */
import type { Context } from "@tensorpipe/core";
import { Counter, Gauge, Histogram, type Registry, register as defaultRegistry } from "prom-client";
import { DEFAULT_DURATION_BUCKETS, DEFAULT_SIZE_BUCKETS, MessageObserver, type MetricsOptions, channelLabel } from "./observer.js";

export { DEFAULT_DURATION_BUCKETS, DEFAULT_SIZE_BUCKETS, type MetricsOptions } from "./observer.js";

/** Options of prometheusMetrics(). */
export interface PrometheusOptions extends MetricsOptions {
  /** Where the metrics go (default: prom-client's global registry). */
  readonly registry?: Registry;
  /** Put before every name (default "tensorpipe_"). */
  readonly prefix?: string;
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
 * A registry takes one context's metrics (prom-client refuses a name twice): give each context a registry, or merge them.
 */
export function prometheusMetrics(context: Context, options: PrometheusOptions = {}): PrometheusMetrics {
  const registry = options.registry ?? defaultRegistry;
  const p = options.prefix ?? "tensorpipe_";
  const registers = [registry];
  const names: string[] = [];
  const named = <T>(name: string, make: (name: string) => T): T => {
    names.push(p + name);
    return make(p + name);
  };
  const directions = [
    ["sent", "Sent"],
    ["received", "Received"],
  ] as const;
  named("pipes_opened_total", (name) => new Counter({ name, help: "Pipes the context opened or accepted.", registers, collect() {
    this.reset();
    this.inc(context.stats().pipesOpened);
  } }));
  named("pipes_open", (name) => new Gauge({ name, help: "Pipes of the context still open.", registers, collect() {
    this.set(context.stats().pipesOpen);
  } }));
  named("messages_total", (name) => new Counter({ name, help: "Messages written (taken by write()) and read (given memory by read()).", labelNames: ["direction"], registers, collect() {
    const s = context.stats();
    this.reset();
    for (const [d, key] of directions) this.inc({ direction: d }, s[`messages${key}`]);
  } }));
  named("bytes_total", (name) => new Counter({ name, help: "Payload and tensor bytes (descriptors and framing not counted).", labelNames: ["direction"], registers, collect() {
    const s = context.stats();
    this.reset();
    for (const [d, key] of directions) this.inc({ direction: d }, s[`bytes${key}`]);
  } }));
  named("channel_tensors_total", (name) => new Counter({ name, help: "Tensors by the channel that carried them.", labelNames: ["channel", "direction"], registers, collect() {
    this.reset();
    for (const [channel, c] of Object.entries(context.stats().channels)) {
      for (const [d, key] of directions) this.inc({ channel, direction: d }, c[`tensors${key}`]);
    }
  } }));
  named("channel_bytes_total", (name) => new Counter({ name, help: "Tensor bytes by the channel that carried them.", labelNames: ["channel", "direction"], registers, collect() {
    this.reset();
    for (const [channel, c] of Object.entries(context.stats().channels)) {
      for (const [d, key] of directions) this.inc({ channel, direction: d }, c[`bytes${key}`]);
    }
  } }));
  named("errors_total", (name) => new Counter({ name, help: "Errors that ended pipes, and operations refused, by code.", labelNames: ["code"], registers, collect() {
    this.reset();
    for (const [code, n] of Object.entries(context.stats().errors)) this.inc({ code }, n);
  } }));
  named("listener_dropped_connections_total", (name) => new Counter({ name, help: "Connections the context's listeners dropped before they became pipes, by code.", labelNames: ["code"], registers, collect() {
    this.reset();
    for (const [code, n] of Object.entries(context.stats().connectionErrors)) this.inc({ code }, n);
  } }));
  const sizes = named("tensor_size_bytes", (name) => new Histogram({ name, help: "Bytes of each tensor written or read, by channel.", labelNames: ["channel", "direction"], buckets: [...(options.sizeBuckets ?? DEFAULT_SIZE_BUCKETS)], registers }));
  const durations = named("message_duration_seconds", (name) => new Histogram({ name, help: "From write() or read() until the message's bytes left or landed, by the channel of its first tensor.", labelNames: ["channel", "direction"], buckets: [...(options.durationBuckets ?? DEFAULT_DURATION_BUCKETS)], registers }));
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
