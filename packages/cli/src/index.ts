export {
  BACKEND_PACKAGES,
  type BackendSpec,
  type BackendOptions,
  type BackendChoice,
  type FoundBackend,
  findBackends,
  createContext,
  listenUrls,
  backendsFromArgs,
} from "./backends.js";
export { type DoctorReport, type DoctorBackend, type DoctorInterface, runDoctor, formatDoctor } from "./doctor.js";
export { type BenchOptions, type BenchResult, type SeriesResult, type Cell, type HeadToHead, DEFAULT_SIZES, README_LOOP, readmeRoundTrip, runBench, parseSize, sizeLabel } from "./bench.js";
export { type PlotSeries, type PlotOptions, svgLinePlot } from "./svg-plot.js";
export { ProgressBar, type ProgressStream } from "./progress-bar.js";
export { type PeerProcess, type PeerEvent, type SpawnOptions, spawnPeer } from "./spawn-peer.js";
export { sinkThroughput } from "./sink-throughput.js";
export { CBaseline, type CBaselineSpec, type CBaselinesHere, type CRoundTrips, C_BASELINES, C_SERIES, findCBaselines } from "./c-baseline.js";
export { type LatencySummary, percentile, median, pairedRatio, summarize, fmt } from "./stats.js";
