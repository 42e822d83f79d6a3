/**
 * The user API: contexts, listeners, pipes, messages, devices, errors and
 * what can be observed of them. Backend authors: `@tensorpipe/core/backend`;
 * tests: `@tensorpipe/core/testing`.
 */
export {
  Context,
  type ContextOptions,
  type ConnectOptions,
  type ListenerOptions,
  type BackendInfo,
  type PipeFlightRecord,
  type WarmUpOptions,
} from "./context.js";
export type { WarmUpReport } from "./warm-up.js";
export type { PathPolicy } from "./path-policy.js";
export { describePathReport } from "./path-report.js";
export { describeFlightEvents, type FlightEvent, type FlightEventKind } from "./flight-recorder.js";
export type { OfferedBackends, PathOutcome, PathReport, PathVerdict } from "./path-report.js";
export { Listener, type ListenerEvents } from "./listener.js";
export type { AuthOptions } from "./auth.js";
export { Pipe } from "./pipe/pipe.js";
export type { ChannelStats, PipeStats, ContextStats } from "./stats.js";
export {
  diagnostics,
  type PipeOpenMessage,
  type PipeCloseMessage,
  type ListenerErrorMessage,
  type MessageSizesMessage,
  type MessageDoneMessage,
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
export { allocateMessage, type MessageMemory } from "./message-memory.js";
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
} from "./device.js";
export type { Viability } from "./viability.js";
export { ErrorCode, TensorPipeError, type TensorPipeErrorOptions, isTensorPipeError } from "./errors.js";
export type { OperationOptions } from "./abort.js";
export type { DevicePairChoice } from "./protocol/handshake.js";
export type { DescriptorLimits } from "./protocol/message.js";
