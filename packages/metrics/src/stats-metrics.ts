/**
 * The metrics both exporters read from context.stats() and from the
 * observer, described once: their names in each stack, what they mean,
 * their unit, and the points each reads. Each exporter only spells the
 * labels its stack's way.
 */
import type { ContextStats } from "@tensorpipe/core";
import type { Direction } from "./observer.js";

/** One value of a metric, with what tells it apart from the others. */
export interface StatPoint {
  readonly value: number;
  readonly channel?: string;
  readonly direction?: Direction;
  readonly code?: string;
}

/** A metric read from context.stats() when collected. */
export interface StatsMetric {
  /** Its Prometheus name, after the prefix. */
  readonly prometheus: string;
  /** Its OpenTelemetry name. */
  readonly opentelemetry: string;
  /** A count that only grows, or a level. */
  readonly kind: "counter" | "gauge";
  readonly help: string;
  /** Its OpenTelemetry unit (Prometheus says it in the name). */
  readonly unit: string;
  /** The labels its points carry, in the order Prometheus lists them. */
  readonly labels: readonly ("channel" | "direction" | "code")[];
  read(s: ContextStats): StatPoint[];
}

const both = (sent: number, received: number, channel?: string): StatPoint[] => [
  { value: sent, ...(channel === undefined ? {} : { channel }), direction: "sent" },
  { value: received, ...(channel === undefined ? {} : { channel }), direction: "received" },
];

const byCode = (counts: Record<string, number>): StatPoint[] => Object.entries(counts).map(([code, value]) => ({ value, code }));

export const STATS_METRICS: readonly StatsMetric[] = [
  {
    prometheus: "pipes_opened_total",
    opentelemetry: "tensorpipe.pipes.opened",
    kind: "counter",
    help: "Pipes the context opened or accepted.",
    unit: "{pipe}",
    labels: [],
    read: (s) => [{ value: s.pipesOpened }],
  },
  {
    prometheus: "pipes_open",
    opentelemetry: "tensorpipe.pipes.open",
    kind: "gauge",
    help: "Pipes of the context still open.",
    unit: "{pipe}",
    labels: [],
    read: (s) => [{ value: s.pipesOpen }],
  },
  {
    prometheus: "messages_total",
    opentelemetry: "tensorpipe.messages",
    kind: "counter",
    help: "Messages written (taken by write()) and read (given memory by read()).",
    unit: "{message}",
    labels: ["direction"],
    read: (s) => both(s.messagesSent, s.messagesReceived),
  },
  {
    prometheus: "bytes_total",
    opentelemetry: "tensorpipe.io",
    kind: "counter",
    help: "Payload and tensor bytes (descriptors and framing not counted).",
    unit: "By",
    labels: ["direction"],
    read: (s) => both(s.bytesSent, s.bytesReceived),
  },
  {
    prometheus: "channel_tensors_total",
    opentelemetry: "tensorpipe.channel.tensors",
    kind: "counter",
    help: "Tensors by the channel that carried them.",
    unit: "{tensor}",
    labels: ["channel", "direction"],
    read: (s) => Object.entries(s.channels).flatMap(([channel, c]) => both(c.tensorsSent, c.tensorsReceived, channel)),
  },
  {
    prometheus: "channel_bytes_total",
    opentelemetry: "tensorpipe.channel.io",
    kind: "counter",
    help: "Tensor bytes by the channel that carried them.",
    unit: "By",
    labels: ["channel", "direction"],
    read: (s) => Object.entries(s.channels).flatMap(([channel, c]) => both(c.bytesSent, c.bytesReceived, channel)),
  },
  {
    prometheus: "errors_total",
    opentelemetry: "tensorpipe.errors",
    kind: "counter",
    help: "Errors that ended pipes, and operations refused, by code.",
    unit: "{error}",
    labels: ["code"],
    read: (s) => byCode(s.errors),
  },
  {
    prometheus: "listener_dropped_connections_total",
    opentelemetry: "tensorpipe.listener.dropped_connections",
    kind: "counter",
    help: "Connections the context's listeners dropped before they became pipes, by code.",
    unit: "{connection}",
    labels: ["code"],
    read: (s) => byCode(s.connectionErrors),
  },
];

/** The histograms the observer feeds, by the channel and direction of each tensor or message. */
export const HISTOGRAMS = {
  size: {
    prometheus: "tensor_size_bytes",
    opentelemetry: "tensorpipe.tensor.size",
    help: "Bytes of each tensor written or read, by channel.",
    unit: "By",
  },
  duration: {
    prometheus: "message_duration_seconds",
    opentelemetry: "tensorpipe.message.duration",
    help: "From write() or read() until the message's bytes left or landed, by the channel of its first tensor.",
    unit: "s",
  },
} as const;
