/**
 * The metrics of a real context, read as a monitoring stack reads them: a
 * prom-client registry scraped over HTTP, and an OpenTelemetry
 * MeterProvider's reader collecting.
 */
import { createServer } from "node:http";
import { connect as netConnect } from "node:net";
import { type Context, ErrorCode, type Listener, type Pipe } from "@tensorpipe/core";
import { AggregationTemporality, type DataPoint, type Histogram as OtelHistogram, MeterProvider, MetricReader } from "@opentelemetry/sdk-metrics";
import { Registry } from "prom-client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createContext } from "@tensorpipe/bench";
import { openTelemetryMetrics } from "../src/opentelemetry.js";
import { prometheusMetrics } from "../src/prometheus.js";

let server: Context;
let client: Context;
let listener: Listener;

beforeAll(async () => {
  server = await createContext({ transports: ["uv"], channels: ["basic"] });
  client = await createContext({ transports: ["uv"], channels: ["basic"] });
  listener = await server.listen("uv://127.0.0.1:0");
});
afterAll(async () => {
  await client.close();
  await server.close();
});

/** Three messages to the server (1 KiB, 1 MiB, then a payload alone), read there; then a connection of garbage it drops. */
async function traffic(): Promise<void> {
  const [here, there]: Pipe[] = await Promise.all([client.connect(listener.addresses()[0]!), listener.accept()]);
  for (const size of [1024, 1 << 20]) {
    await Promise.all([here.write({ tensors: [{ buffer: new Uint8Array(size) }] }), there.readMessage()]);
  }
  await Promise.all([here.write({ payloads: [{ data: new Uint8Array(10) }] }), there.readMessage()]);
  here.close();
  const dropped = new Promise((resolve) => listener.once("connectionError", resolve));
  const [host, port] = listener.addresses()[0]!.slice("uv://".length).split(":");
  const junk = netConnect(Number(port), host);
  junk.end(Buffer.from([4, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]));
  await dropped;
}

describe("metrics of a context", () => {
  it("are scraped from a prom-client registry over HTTP", async () => {
    const registry = new Registry();
    const metrics = prometheusMetrics(server, { registry });
    await traffic();
    const http = createServer(async (_req, res) => {
      res.setHeader("content-type", registry.contentType);
      res.end(await registry.metrics());
    });
    await new Promise<void>((resolve) => http.listen(0, "127.0.0.1", resolve));
    const { port } = http.address() as { port: number };
    const response = await fetch(`http://127.0.0.1:${port}/metrics`);
    const text = await response.text();
    http.close();
    expect(response.headers.get("content-type")).toMatch(/^text\/plain/);
    const value = (line: string) =>
      Number(
        text
          .split("\n")
          .find((l) => l.startsWith(`${line} `))
          ?.slice(line.length + 1),
      );
    expect(value("tensorpipe_pipes_opened_total")).toBeGreaterThanOrEqual(1);
    expect(value('tensorpipe_messages_total{direction="received"}')).toBe(3);
    expect(value('tensorpipe_bytes_total{direction="received"}')).toBe(1024 + (1 << 20) + 10);
    expect(value('tensorpipe_channel_tensors_total{channel="basic",direction="received"}')).toBe(2);
    expect(value('tensorpipe_channel_bytes_total{channel="basic",direction="received"}')).toBe(1024 + (1 << 20));
    expect(value(`tensorpipe_listener_dropped_connections_total{code="${ErrorCode.PROTOCOL}"}`)).toBe(1);
    expect(value('tensorpipe_tensor_size_bytes_bucket{le="1024",channel="basic",direction="received"}')).toBe(1);
    expect(value('tensorpipe_tensor_size_bytes_bucket{le="4194304",channel="basic",direction="received"}')).toBe(2);
    expect(value('tensorpipe_message_duration_seconds_count{channel="basic",direction="received"}')).toBe(2);
    expect(value('tensorpipe_message_duration_seconds_count{channel="none",direction="received"}')).toBe(1);
    expect(text).toMatch(/# TYPE tensorpipe_message_duration_seconds histogram/);
    metrics.close();
    expect(await registry.metrics()).toBe("\n");
  });

  it("are collected as OpenTelemetry instruments by a MeterProvider's reader", async () => {
    class Reader extends MetricReader {
      protected override async onForceFlush(): Promise<void> {}
      protected override async onShutdown(): Promise<void> {}
    }
    const reader = new Reader({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
    const provider = new MeterProvider({ readers: [reader] });
    const before = server.stats();
    const metrics = openTelemetryMetrics(server, provider.getMeter("tensorpipe-test"));
    await traffic();
    const { resourceMetrics, errors } = await reader.collect();
    expect(errors).toEqual([]);
    const all = resourceMetrics.scopeMetrics.flatMap((s) => s.metrics);
    const points = (name: string) => all.find((m) => m.descriptor.name === name)?.dataPoints as DataPoint<unknown>[] | undefined;
    const point = (name: string, attributes: Record<string, string>) =>
      points(name)?.find((p) => Object.entries(attributes).every(([k, v]) => p.attributes[k] === v))?.value;
    expect(point("tensorpipe.messages", { "network.io.direction": "receive" })).toBe(before.messagesReceived + 3);
    expect(point("tensorpipe.channel.io", { "tensorpipe.channel": "basic", "network.io.direction": "receive" })).toBe(
      before.channels.basic!.bytesReceived + 1024 + (1 << 20),
    );
    expect(point("tensorpipe.listener.dropped_connections", { "error.type": ErrorCode.PROTOCOL })).toBe((before.connectionErrors[ErrorCode.PROTOCOL] ?? 0) + 1);
    const sizes = point("tensorpipe.tensor.size", { "tensorpipe.channel": "basic", "network.io.direction": "receive" }) as OtelHistogram;
    expect(sizes.count).toBe(2);
    expect(sizes.sum).toBe(1024 + (1 << 20));
    expect(all.find((m) => m.descriptor.name === "tensorpipe.tensor.size")?.descriptor.unit).toBe("By");
    const durations = point("tensorpipe.message.duration", { "tensorpipe.channel": "basic", "network.io.direction": "transmit" });
    expect(durations).toBeUndefined();
    expect((point("tensorpipe.message.duration", { "tensorpipe.channel": "basic", "network.io.direction": "receive" }) as OtelHistogram).count).toBe(2);
    // Twice on one Meter would count twice: refused, until closed.
    expect(() => openTelemetryMetrics(server, provider.getMeter("tensorpipe-test"))).toThrow(/on this Meter already/);
    metrics.close();
    openTelemetryMetrics(server, provider.getMeter("tensorpipe-test"), { attributes: { "tensorpipe.context": "server" } }).close();
    await provider.shutdown();
  });

  it.each([
    ["empty", []],
    ["not increasing", [1024, 64]],
    ["a string", "64,1024"],
    ["not finite", [64, Number.POSITIVE_INFINITY]],
    ["bigints", [1n]],
    ["a million", Array.from({ length: 1e6 }, (_, i) => 1e6 - i)],
  ])("refuse histogram bounds that are %s, saying what they must be, before registering anything", (_, bad) => {
    const registry = new Registry();
    for (const options of [{ sizeBuckets: bad }, { durationBuckets: bad }] as never[]) {
      expect(() => prometheusMetrics(server, { registry, ...(options as object) })).toThrow(
        expect.objectContaining({
          code: ErrorCode.INVALID_ARG,
          message: expect.stringMatching(
            /Buckets must be a non-empty array of finite upper bounds above 0, each larger than the one before .*; got (\[[^\]]{0,80}\]|string)$/,
          ),
        }),
      );
      expect(() => openTelemetryMetrics(server, new MeterProvider().getMeter("bad"), options)).toThrow(
        expect.objectContaining({ code: ErrorCode.INVALID_ARG }),
      );
    }
    expect(registry.getMetricsAsArray()).toEqual([]);
  });
});
