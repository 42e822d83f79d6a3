/**
 * For tests (`@tensorpipe/core/testing`): the conformance suites every
 * transport and channel package runs against itself (with vitest), the
 * helpers they use, and what a test needs to play a peer by hand: the wire
 * protocol's messages, captured upstream sessions and the shared-secret
 * handshake.
 */
export { describeTransportConformance, type TransportConformanceOptions } from "./transport-conformance.js";
export { type ChannelConformanceOptions, describeChannelConformance } from "./channel-conformance.js";
export { CPU_MEMORY, type ConformanceMemory, type ConformancePeer } from "./conformance-side.js";
export {
  describeNegotiationConformance,
  type NegotiationConformanceOptions,
  type NegotiatedTransport,
} from "./negotiation-conformance.js";
export { fillPattern, patterned, hasPattern, prng } from "./patterns.js";
export { MemoryConnection, MemoryNetwork } from "./memory-connection.js";
export { type MemoryChannelKind, type MemoryPipeConnections, type MemoryPipeOptions, type MemoryPipePair, memoryPipePair } from "./memory-pipe.js";
export { parseCapture, loadCapture, stream, onTheWire, type CapturedStream } from "./capture.js";
export { upstreamSession, type UpstreamSession, type UpstreamSessionName } from "./upstream-sessions.js";
export * as protocol from "../protocol/index.js";
export { SharedSecretAuth, type AuthSession } from "../auth.js";
export { AUTH_ENTRY, NAME_ENTRY } from "../handshake/extensions.js";
