/**
 * The conformance suites every transport and channel package runs against
 * itself (with vitest), and the helpers they use.
 */
export { describeTransportConformance, type TransportConformanceOptions } from "./transport-conformance.js";
export { describeChannelConformance, type ChannelConformanceOptions } from "./channel-conformance.js";
export { fillPattern, patterned, hasPattern, prng } from "./patterns.js";
export { parseCapture, loadCapture, stream, onTheWire, type CapturedStream } from "./capture.js";
export { upstreamSession, type UpstreamSession, type UpstreamSessionName } from "./upstream-sessions.js";
