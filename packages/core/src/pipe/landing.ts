/**
 * How a message's payloads and tensors are asked for, once read() has
 * memory for them: the payloads from the main connection, the tensors
 * from their channels, all at once for a message of a few parts, and in
 * a window (PARTS_IN_FLIGHT parts, BYTES_IN_FLIGHT bytes) for a large
 * one, the next part asked for as one lands. A peer that announces 16,384
 * tensors and sends none then costs this side a window of them, not a
 * read and its memory for each: memory that readMessage() makes part by
 * part (MessageMemory) is made as the window reaches it. Each connection
 * serves its reads in order, so the next message's parts wait until every
 * part of this one has been asked for.
 */
import type { Channel, TensorLanding } from "../channel.js";
import { CPU_DEVICE, type Device, type TensorBuffer, bufferDevice } from "../device.js";
import { Deferred } from "../deferred.js";
import { Fifo } from "../fifo.js";
import type { Descriptor } from "../message.js";
import { type Connection, DONE } from "../transport.js";
import type { PipeObserver } from "./observer.js";
import type { ChannelRoutes } from "./routes.js";

/** Parts asked for and not landed, at most, once a message is past them. */
export const PARTS_IN_FLIGHT = 64;
/** Bytes asked for and not landed, at most (a single larger part goes alone). */
export const BYTES_IN_FLIGHT = 16 * 1024 * 1024;

/** Where a message's parts land, each asked for in order as its turn comes. */
export interface PartMemory {
  payload(i: number, length: number): ArrayBufferView;
  tensor(i: number, length: number): TensorBuffer;
  /** The device tensor `i` lands on. */
  tensorDevice(i: number): Device;
  /** Where tensor `i` lands when the pipe owns the memory (readMessage()): a channel may lend the sender's own. */
  landing?(i: number, length: number): TensorLanding;
}

/** What asking for parts needs of the pipe. */
export interface LandingHost {
  readonly main: Connection;
  readonly routes: ChannelRoutes;
  readonly observer: PipeObserver;
}

/** A message whose parts are asked for in a window. */
class Landing {
  next = 0;
  landed = 0;
  partsOut = 0;
  bytesOut = 0;
  failed = false;
  readonly done = new Deferred<void>();

  constructor(
    readonly d: Descriptor,
    readonly memory: PartMemory,
    /** Called once every part has been asked for. */
    readonly issued: () => void,
  ) {}

  get total(): number {
    return this.d.payloads.length + this.d.tensors.length;
  }
}

/** One pipe's parts in flight. */
export class Landings {
  private readonly queue = new Fifo<Landing>();

  constructor(private readonly host: LandingHost) {}

  /** Whether land() asks for every part of `d` (`bytes` in all) at once: then it keeps no hold on the memory given. */
  atOnce(d: Descriptor, bytes: number): boolean {
    return this.queue.length === 0 && d.payloads.length + d.tensors.length <= PARTS_IN_FLIGHT && bytes <= BYTES_IN_FLIGHT;
  }

  /**
   * Asks for every part of `d` (`bytes` in all) in `memory`; `issued` is
   * called once all have been asked for (at once, unless the message is
   * large or earlier ones are still being asked for). DONE when every part
   * landed at once.
   */
  land(d: Descriptor, memory: PartMemory, bytes: number, issued: () => void): Promise<void> {
    if (this.atOnce(d, bytes)) {
      const settled = this.all(d, memory);
      issued();
      return settled;
    }
    const landing = new Landing(d, memory, issued);
    this.queue.push(landing);
    this.pump();
    return landing.done.promise;
  }

  /** A message of a few parts: each asked for now, one promise for all. */
  private all(d: Descriptor, memory: PartMemory): Promise<void> {
    // Reads that finished at once (DONE) need nothing more.
    let pending: Promise<void>[] | undefined;
    for (let i = 0; i < d.payloads.length; i++) {
      const got = this.host.main.readInto(memory.payload(i, d.payloads[i]!.length));
      if (got !== DONE) (pending ??= []).push(got);
    }
    for (let i = 0; i < d.tensors.length; i++) {
      const got = this.recv(d, memory, i);
      if (got !== DONE) (pending ??= []).push(got);
    }
    return pending === undefined ? DONE : pending.length === 1 ? pending[0]! : Promise.all(pending).then(() => undefined);
  }

  private recv(d: Descriptor, memory: PartMemory, i: number): Promise<void> {
    const t = d.tensors[i]!;
    if (memory.landing) {
      const lending = this.host.routes.between(CPU_DEVICE, t.sourceDevice)!;
      if (lending.recvLent) {
        this.host.observer.receiving(lending, t.length);
        return lending.recvLent(t.length, memory.landing(i, t.length));
      }
    }
    const buffer = memory.tensor(i, t.length);
    const channel: Channel = this.host.routes.between(bufferDevice(buffer), t.sourceDevice)!;
    this.host.observer.receiving(channel, t.length);
    return channel.recv(buffer, t.length);
  }

  /** Asks for parts of the oldest message while the window has room; the next message's once it has asked for all. */
  private pump(): void {
    for (let landing = this.queue.peek(); landing; landing = this.queue.peek()) {
      const { d } = landing;
      while (landing.next < landing.total && !landing.failed) {
        const i = landing.next;
        const length = i < d.payloads.length ? d.payloads[i]!.length : d.tensors[i - d.payloads.length]!.length;
        if (landing.partsOut > 0 && (landing.partsOut >= PARTS_IN_FLIGHT || landing.bytesOut + length > BYTES_IN_FLIGHT)) return;
        landing.next++;
        landing.partsOut++;
        landing.bytesOut += length;
        let got: Promise<void>;
        try {
          got = i < d.payloads.length ? this.host.main.readInto(landing.memory.payload(i, length)) : this.recv(d, landing.memory, i - d.payloads.length);
        } catch (e) {
          got = Promise.reject(e);
        }
        if (got === DONE) this.partLanded(landing, length, false);
        else
          got.then(
            () => this.partLanded(landing, length, true),
            (e: unknown) => this.partFailed(landing, e),
          );
      }
      this.queue.shift();
      landing.issued();
    }
  }

  private partLanded(landing: Landing, length: number, later: boolean): void {
    landing.partsOut--;
    landing.bytesOut -= length;
    if (++landing.landed === landing.total) landing.done.resolve();
    if (later) this.pump();
  }

  private partFailed(landing: Landing, e: unknown): void {
    if (landing.failed) return;
    landing.failed = true;
    landing.done.reject(e);
  }
}
