/**
 * What the repository's tests and measuring scripts share: contexts over
 * the first-party backends, the peer process, the bench and its parts.
 * This package is private: nothing here is published.
 */
export { type BackendChoice, type ProbedBackend, FIRST_PARTY, createContext, probeBackends } from "./context.js";
export { type PeerEvent, type PeerProcess, type SpawnOptions, type JsonChild, jsonChild, spawnJsonChild, spawnPeer } from "./spawn-peer.js";
export { UPSTREAM_PEER, type UpstreamListening, upstreamClient, upstreamListener, upstreamPeerMissing, upstreamRoundTrips } from "./upstream-peer.js";
export { type BenchOptions, runBench } from "./bench.js";
export type { BenchResult, Cell, HeadToHead, SeriesResult } from "./result.js";
export { DEFAULT_PAIR } from "./report.js";
export { README_LOOP, readmeRoundTrip, readmeRoundTrips } from "./series.js";
export { warmRoundTrips } from "./schedule.js";
export { DEFAULT_SIZES, parseSize, sizeLabel } from "./sizes.js";
export { type LatencySummary, fmt, median, pairedRatio, percentile, summarize } from "./stats.js";
export { sinkThroughput } from "./sink-throughput.js";
export { CBaseline, type CBaselineSpec, type CBaselinesHere, type CRoundTrips, C_BASELINES, C_SERIES, findCBaselines } from "./c-baseline.js";
export { ParallelMemcpy } from "./memcpy-baseline.js";
export { svgLinePlot, type PlotOptions, type PlotSeries } from "./svg-plot.js";
export { ProgressBar, type ProgressStream } from "./progress-bar.js";
export { TestNetwork } from "./test-network.js";
