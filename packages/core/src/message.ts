import type { Device, TensorBuffer } from "./device.js";

/** What a pipe writes: metadata, CPU payloads and tensors on any device. */
export interface Message {
  /** Free text for the application, sent in the descriptor (default ""). */
  metadata?: string | undefined;
  /** CPU bytes sent over the pipe's transport, after the descriptor. */
  payloads?: readonly MessagePayload[] | undefined;
  /** Device memory sent over the channel negotiated for its device pair. */
  tensors?: readonly MessageTensor[] | undefined;
}

/** One payload of a message: CPU bytes, sent as they are. */
export interface MessagePayload {
  /** The bytes; they must stay unchanged until the write resolves. */
  data: ArrayBufferView;
  /** Free text, sent in the descriptor (default ""). */
  metadata?: string | undefined;
}

/** One tensor of a message: memory on a device, moved by a channel. */
export interface MessageTensor {
  /** The memory: a CPU ArrayBufferView or a CUDA buffer (see cudaBuffer()). */
  buffer: TensorBuffer;
  /** Bytes to send from the start of `buffer`; defaults to all of it. */
  length?: number | undefined;
  /**
   * Where the receiver should put it. When absent, a CPU tensor goes to the
   * receiver's CPU and a device tensor is the receiver's to place. `null`
   * leaves any tensor to the receiver: it names the device in its
   * allocation and answers with a DescriptorReply before the bytes move (a
   * round trip more, and a write that resolves only once the peer reads).
   */
  targetDevice?: Device | null | undefined;
  /** Free text, sent in the descriptor (default ""). */
  metadata?: string | undefined;
}

/** What a reader learns of a message before it provides memory for it. */
export interface Descriptor {
  /** The message's metadata. */
  metadata: string;
  /** Each payload's length and metadata, in order. */
  payloads: PayloadDescriptor[];
  /** Each tensor's length, devices and metadata, in order. */
  tensors: TensorDescriptor[];
}

/** A payload as its descriptor announces it. */
export interface PayloadDescriptor {
  /** Bytes the allocation must give it, exactly. */
  length: number;
  /** The payload's metadata. */
  metadata: string;
}

/** A tensor as its descriptor announces it. */
export interface TensorDescriptor {
  /** Bytes the allocation must give it, at least. */
  length: number;
  /** The device it comes from, at the sender. */
  sourceDevice: Device;
  /** The device the sender asked for here; absent when the reader chooses. */
  targetDevice?: Device;
  /** The tensor's metadata. */
  metadata: string;
}

/** The memory a reader provides for a message: bytes land right there. */
export interface Allocation {
  /** One per payload, each exactly the payload's length (read() takes none for a message without). */
  payloads: {
    /** Where the payload's bytes land. */
    data: ArrayBufferView;
  }[];
  /** One per tensor, each at least the tensor's length, on the target device (read() takes none for a message without). */
  tensors: {
    /** Where the tensor's bytes land. */
    buffer: TensorBuffer;
  }[];
}

/**
 * A whole message as returned by Pipe.readMessage(), in fresh memory, or
 * for a tensor the sender lent (Pipe.loan()) a view of the sender's
 * shared memory: release() gives those back (`using` does it too, and so
 * does dropping the message, once it is collected).
 */
export interface ReceivedMessage {
  /** The message's metadata. */
  metadata: string;
  /** Each payload, in fresh memory. */
  payloads: {
    /** The payload's bytes. */
    data: Uint8Array;
    /** The payload's metadata. */
    metadata: string;
  }[];
  /** Each tensor, in fresh CPU memory. */
  tensors: {
    /** The tensor's bytes, in fresh CPU memory (small parts share one buffer), or a view of the memory the sender lent; 64-byte aligned either way: view them as the type they are, e.g. new Float32Array(buffer.buffer, buffer.byteOffset, length / 4). */
    buffer: Uint8Array;
    /** How many bytes of `buffer` it fills. */
    length: number;
    /** The device it came from, at the sender. */
    sourceDevice: Device;
    /** The tensor's metadata. */
    metadata: string;
  }[];
  /**
   * Gives back the tensors the sender lent: their views read as empty from
   * now on, and the sender may lend that memory again. Does nothing for a
   * message with none, and the second time.
   */
  release(): void;
  /** release(), for `using`. */
  [Symbol.dispose](): void;
}
