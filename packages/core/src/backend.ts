/**
 * The stable surface for backend authors (`@tensorpipe/core/backend`):
 * everything of the user API, and the interfaces a transport or a channel
 * implements, the native connection core the first-party addons share,
 * viability, the libnop codec, host identity and the helpers for errors,
 * cancellation, addresses and native addons. docs/backends.md says how to
 * write one.
 */
export * from "./index.js";
export type { PipeParts, PipeOptions } from "./pipe/parts.js";
export {
  type TransportBackend,
  type ChannelBackend,
  type BackendDescriptor,
  isBackendDescriptor,
  registerBackend,
} from "./backend-descriptor.js";
export type { Registered } from "./negotiation.js";
export { type DebugLog, debugLog } from "./debug.js";
export { cpuBytes } from "./device.js";
export { type HostIdentity, hostIdentity } from "./host-identity.js";
export {
  type TransportContext,
  type TransportListener,
  type Connection,
  type DetachedSocket,
  type FrameCallback,
  type ListenOptions,
  type TransportMedium,
  type PeerProcess,
  DONE,
  writeFrame,
} from "./transport.js";
export { NativeConnection, type NativeFrameConnection, connectNative } from "./native-connection.js";
export { nativeAddonLoader, addonCandidates } from "./native-addon.js";
export type { ChannelContext, Channel, DeviceDescriptor, Endpoint, PipeInfo, TensorLanding } from "./channel.js";
export { VIABLE, notViable } from "./viability.js";
export { fromNativeError, protocolError, closedError } from "./errors.js";
export { Deadline, operationDeadline, raceSignal, abortError } from "./abort.js";
export type { OperationOptions } from "./abort.js";
export { parseUrl, splitHostPort, joinHostPort } from "./address.js";
export { Deferred } from "./deferred.js";
export { describeValue } from "./describe-value.js";
export { type BufferTag, bufferTag } from "./buffer-tag.js";
export { lentBuffer } from "./lent-buffer.js";
export { peerText, peerExcerpt, safeText } from "./peer-text.js";
export { OptionChecks } from "./option-checks.js";
export { NopReader } from "./nop/reader.js";
export { NopWriter } from "./nop/writer.js";
export { Nop } from "./nop/prefixes.js";
