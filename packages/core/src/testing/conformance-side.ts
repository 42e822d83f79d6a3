import { createHash } from "node:crypto";
import type { ChannelContext } from "../channel.js";
import { CPU_DEVICE, type Device, type TensorBuffer, isCpuBuffer } from "../device.js";
import type { Descriptor } from "../message.js";
import type { Pipe } from "../pipe/pipe.js";
import type { TransportContext } from "../transport.js";
import { patternChunks, patterned } from "./patterns.js";

/**
 * The memory a channel's tensors live in, as the suite makes and checks
 * them: a GPU channel runs the suite on its device's memory.
 */
export interface ConformanceMemory {
  /** The device the tensors are on, and their target device. */
  device: Device;
  /** A buffer on the device holding `host`'s bytes. */
  from(host: Uint8Array): TensorBuffer | Promise<TensorBuffer>;
  /** A buffer of `bytes` on the device to read into. */
  alloc(bytes: number): TensorBuffer | Promise<TensorBuffer>;
  /** The first `bytes` of `buffer`, copied to the host. */
  toHost(buffer: TensorBuffer, bytes: number): Uint8Array | Promise<Uint8Array>;
  /** Gives a buffer back once the suite is done with it. */
  free?(buffer: TensorBuffer): void;
}

/** CPU memory: the tensors are the host's bytes. */
export const CPU_MEMORY: ConformanceMemory = {
  device: CPU_DEVICE,
  from: (host) => host,
  alloc: (bytes) => new Uint8Array(bytes),
  toHost: (buffer, bytes) => {
    if (!isCpuBuffer(buffer)) throw new Error("not CPU memory");
    return new Uint8Array(buffer.buffer, buffer.byteOffset, bytes);
  },
};

/**
 * What a second process needs to play the connecting end of the channel
 * suite: the module named by `ChannelConformanceOptions.peerProcess`
 * exports one as `conformancePeer`.
 */
export interface ConformancePeer {
  create(): ChannelContext | Promise<ChannelContext>;
  createTransport(): TransportContext | Promise<TransportContext>;
  memory?: ConformanceMemory;
}

/** Bytes made by `patterned(length, seed)`, on the writer's device. */
export interface PatternSpec {
  length: number;
  seed: number;
  metadata?: string;
}

/** A tensor to write: `target` "device" targets the suite's device, null leaves it to the reader. */
export interface TensorSpec extends PatternSpec {
  target?: "device" | null;
}

/** A message described by its patterns, so that either end, in any process, can make it. */
export interface MessageSpec {
  metadata?: string;
  payloads?: PatternSpec[];
  tensors?: TensorSpec[];
}

/** Received bytes, by their length and digest. */
export interface ReceivedBytes {
  length: number;
  sha256: string;
}

export interface ReceivedDescriptor {
  metadata: string;
  payloads: { length: number; metadata: string }[];
  tensors: { length: number; metadata: string; targetDevice?: Device }[];
}

export interface Received {
  descriptor: ReceivedDescriptor;
  payloads: ReceivedBytes[];
  tensors: ReceivedBytes[];
}

/** One end of the suite's pipe, in this process or in the peer process. */
export interface ConformanceSide {
  channelFor(): Promise<string | undefined>;
  write(spec: MessageSpec): Promise<void>;
  /** The next message, its tensors read into fresh device memory. */
  receive(): Promise<Received>;
  readDescriptor(): Promise<ReceivedDescriptor>;
  close(): Promise<void>;
}

export function digest(bytes: Uint8Array): ReceivedBytes {
  return { length: bytes.length, sha256: createHash("sha256").update(bytes).digest("hex") };
}

/** True when `received` holds exactly `patterned(received.length, seed)`. */
export function matches(received: ReceivedBytes, seed: number): boolean {
  const hash = createHash("sha256");
  for (const chunk of patternChunks(received.length, seed)) hash.update(chunk);
  return hash.digest("hex") === received.sha256;
}

/** The end of a pipe in this process, making and reading tensors in `memory`. */
export class LocalSide implements ConformanceSide {
  /** Buffers made so far, freed by `release()`. */
  private readonly made: TensorBuffer[] = [];
  /** Messages are made one after another so that they are written in the order asked. */
  private tail: Promise<unknown> = Promise.resolve();

  constructor(
    readonly pipe: Pipe,
    private readonly memory: ConformanceMemory,
  ) {}

  async channelFor(): Promise<string | undefined> {
    const dev = this.memory.device;
    return this.pipe.channelFor(dev, dev);
  }

  /** A buffer on the device holding `patterned(bytes, seed)`. */
  async tensor(bytes: number, seed: number): Promise<TensorBuffer> {
    const b = await this.memory.from(patterned(bytes, seed));
    this.made.push(b);
    return b;
  }

  async alloc(bytes: number): Promise<TensorBuffer> {
    const b = await this.memory.alloc(bytes);
    this.made.push(b);
    return b;
  }

  write(spec: MessageSpec): Promise<void> {
    const built = this.tail.then(() => this.build(spec));
    const written = built.then((message) => this.pipe.write(message));
    this.tail = built.catch(() => undefined);
    return handled(written);
  }

  private async build(spec: MessageSpec) {
    const dev = this.memory.device;
    const tensors = await Promise.all(
      (spec.tensors ?? []).map(async (t) => ({
        buffer: await this.tensor(t.length, t.seed),
        length: t.length,
        targetDevice: t.target === null ? null : dev,
        ...(t.metadata === undefined ? {} : { metadata: t.metadata }),
      })),
    );
    const payloads = (spec.payloads ?? []).map((p) => ({
      data: patterned(p.length, p.seed),
      ...(p.metadata === undefined ? {} : { metadata: p.metadata }),
    }));
    return { ...(spec.metadata === undefined ? {} : { metadata: spec.metadata }), payloads, tensors };
  }

  async readDescriptor(): Promise<ReceivedDescriptor> {
    return summary(await this.pipe.readDescriptor());
  }

  async receive(): Promise<Received> {
    const d = await this.pipe.readDescriptor();
    const targets = await Promise.all(d.tensors.map((t) => this.alloc(t.length)));
    const payloads = d.payloads.map((x) => new Uint8Array(x.length));
    await this.pipe.read({ payloads: payloads.map((data) => ({ data })), tensors: targets.map((buffer) => ({ buffer })) });
    const tensors = await Promise.all(targets.map(async (b, i) => digest(await this.memory.toHost(b, d.tensors[i]!.length))));
    return { descriptor: summary(d), payloads: payloads.map(digest), tensors };
  }

  async close(): Promise<void> {
    this.pipe.close();
  }

  /** Frees every buffer this side made. */
  release(): void {
    if (this.memory.free) this.made.forEach((b) => this.memory.free!(b));
    this.made.length = 0;
  }
}

/**
 * `p`, marked handled: a test that times out leaves the writes it had not
 * awaited yet, which reject once the pipes close after it, each an
 * unhandled rejection blamed on whichever test runs then. A test that
 * awaits `p` still gets its rejection.
 */
export function handled<T>(p: Promise<T>): Promise<T> {
  p.catch(() => undefined);
  return p;
}

function summary(d: Descriptor): ReceivedDescriptor {
  return {
    metadata: d.metadata,
    payloads: d.payloads.map((p) => ({ length: p.length, metadata: p.metadata })),
    tensors: d.tensors.map((t) => ({
      length: t.length,
      metadata: t.metadata,
      ...(t.targetDevice === undefined ? {} : { targetDevice: t.targetDevice }),
    })),
  };
}
