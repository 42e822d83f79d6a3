export { Context, type ContextOptions, type ConnectOptions, type BackendInfo } from "./context.js";
export { Listener, type ListenerEvents, type ListenTarget } from "./listener.js";
export type { HandshakeSettings } from "./handshake.js";
export { type AuthOptions, type AuthSession, SharedSecretAuth, AUTH_ENTRY } from "./auth.js";
export { Pipe, type PipeParts, type PipeOptions } from "./pipe.js";
export { type ChannelStats, type PipeStats, type ContextStats } from "./stats.js";
export { type DebugLog, debugLog } from "./debug.js";
export {
  diagnostics,
  type PipeOpenMessage,
  type PipeCloseMessage,
  type ListenerErrorMessage,
  type MessageSizesMessage,
  type TypedChannel,
} from "./diagnostics.js";
export type {
  Message,
  MessagePayload,
  MessageTensor,
  Descriptor,
  PayloadDescriptor,
  TensorDescriptor,
  Allocation,
  ReceivedMessage,
} from "./message.js";
export {
  type Device,
  type DeviceBuffer,
  type TensorBuffer,
  type CudaBuffer,
  cudaBuffer,
  isCudaBuffer,
  CPU_DEVICE,
  deviceKey,
  sameDevice,
  isCpuBuffer,
  bufferDevice,
  asBytes,
  cpuBytes,
} from "./device.js";
export { hostIdentity } from "./host-identity.js";
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
export {
  NativeConnection,
  type NativeFrameConnection,
  connectNative,
} from "./native-connection.js";
export { nativeAddonLoader, addonCandidates } from "./native-addon.js";
export type { ChannelContext, Channel, DeviceDescriptor, Endpoint, PipeInfo } from "./channel.js";
export { type Viability, VIABLE, notViable } from "./viability.js";
export {
  ErrorCode,
  TensorPipeError,
  type TensorPipeErrorOptions,
  isTensorPipeError,
  fromNativeError,
  protocolError,
  closedError,
} from "./errors.js";
export { type OperationOptions, operationSignal, raceSignal, abortError } from "./abort.js";
export { parseUrl, splitHostPort, joinHostPort } from "./address.js";
export { Deferred } from "./deferred.js";
export * as protocol from "./protocol.js";
export { NopReader, NopWriter, Nop } from "./nop.js";
export {
  buildBrochure,
  chooseTransport,
  chooseChannels,
  checkAnswer,
  byPriority,
  type Registered,
  type ChannelChoice,
  type Verdict,
} from "./negotiation.js";
