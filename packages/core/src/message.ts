import type { Device, TensorBuffer } from "./device.js";

/** What a pipe writes: metadata, CPU payloads and tensors on any device. */
export interface Message {
  metadata?: string;
  payloads?: readonly MessagePayload[];
  tensors?: readonly MessageTensor[];
}

export interface MessagePayload {
  data: ArrayBufferView;
  metadata?: string;
}

export interface MessageTensor {
  buffer: TensorBuffer;
  /** Bytes to send from the start of `buffer`; defaults to all of it. */
  length?: number;
  /**
   * Where the receiver should put it. When absent the receiver decides in
   * its allocation and answers with a DescriptorReply before the bytes move.
   */
  targetDevice?: Device;
  metadata?: string;
}

/** What a reader learns of a message before it provides memory for it. */
export interface Descriptor {
  metadata: string;
  payloads: PayloadDescriptor[];
  tensors: TensorDescriptor[];
}

export interface PayloadDescriptor {
  length: number;
  metadata: string;
}

export interface TensorDescriptor {
  length: number;
  sourceDevice: Device;
  targetDevice?: Device;
  metadata: string;
}

/** The memory a reader provides for a message: bytes land right there. */
export interface Allocation {
  payloads: { data: ArrayBufferView }[];
  tensors: { buffer: TensorBuffer }[];
}

/** A whole message as returned by Pipe.readMessage(). */
export interface ReceivedMessage {
  metadata: string;
  payloads: { data: Uint8Array; metadata: string }[];
  tensors: { buffer: TensorBuffer; length: number; sourceDevice: Device; metadata: string }[];
}
