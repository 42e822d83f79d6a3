/**
 * The reader's half of zero-copy: the segments of the peer's pool that
 * this side has mapped, the views of them it handed out, and the releases
 * it owes the peer. A view goes back when its message is released, or when
 * it is collected; either way its slot's release goes to the peer with the
 * next batch. A segment is taken from the process proven to be the peer,
 * only when it is a sealed memfd, and kept mapped while tensors come in
 * it: one without views, and none for IDLE_MS, is unmapped (mapped again
 * if it comes back), and the mapped bytes are bounded, segments without
 * views going first.
 */
import { ErrorCode, TensorPipeError, lentBuffer } from "@tensorpipe/core/backend";
import type { NativeAddon } from "./native.js";
import { IDLE_MS, type SlotPlace } from "./shared-pool.js";
import { TurnEndRegistry } from "./turn-end-registry.js";

interface Mapped {
  /** The addon's number for it. */
  id: number;
  bytes: number;
  /** Views of it not released. */
  views: number;
  /** When a tensor last came in it (performance.now()). */
  usedAt: number;
}

/** A view handed out, until it is released or collected. */
interface Held {
  mapped: Mapped;
  slot: number;
  generation: number;
  released: boolean;
  registered: boolean;
}

/** The first byte of a release frame on the answers' connection: an answer's text never starts so. */
export const RELEASE_FRAME = 0;

/** One pipe's segments of its peer's pool. */
export class PeerSegments {
  /** By the peer's segment number. */
  private readonly mapped = new Map<number, Mapped>();
  private mappedBytes = 0;
  private closed = false;
  private trimmer?: NodeJS.Timeout;
  private readonly collected = new TurnEndRegistry<Held>(
    (held) => this.release(held),
    (held) => held.released,
  );

  constructor(
    private readonly addon: NativeAddon,
    /** The most bytes of the peer's segments mapped at once. */
    private readonly cap: number,
    /** Sends a release frame to the peer. */
    private readonly sendReleases: (frame: Uint8Array) => void,
  ) {}

  /** A view of the peer's slot at `place`, and what gives it back. */
  view(pidfd: number, place: SlotPlace): { view: Uint8Array; release: () => void } {
    const mapped = this.segment(pidfd, place);
    const buffer = lentBuffer(this.addon.viewSegment(mapped.id, place.offset, place.length));
    // Held by the registry, it must not hold the buffer: the release the
    // message keeps does, to detach it (a WeakRef cost more a message).
    const held: Held = { mapped, slot: place.slot, generation: place.generation, released: false, registered: false };
    mapped.views++;
    this.collected.register(buffer, held);
    return { view: new Uint8Array(buffer), release: () => this.release(held, buffer) };
  }

  /** Copies the peer's slot at `place` into `target` and releases it at once (read() with memory of the reader's). */
  copy(pidfd: number, place: SlotPlace, target: Uint8Array): void {
    const mapped = this.segment(pidfd, place);
    this.addon.copyFromSegment(mapped.id, place.offset, place.length, target);
    this.owe(place.slot, place.generation);
  }

  /** Forgets every segment; views out keep theirs mapped until they go. */
  close(): void {
    this.closed = true;
    clearInterval(this.trimmer);
    for (const m of this.mapped.values()) this.addon.closeSegment(m.id);
    this.mapped.clear();
  }

  /** Gives `held` back: released (with its buffer, to detach) or collected. */
  private release(held: Held, buffer?: ArrayBuffer): void {
    if (held.released) return;
    held.released = true;
    this.collected.unregister(held);
    if (buffer) this.addon.detachBuffer(buffer);
    held.mapped.views--;
    this.owe(held.slot, held.generation);
  }

  /**
   * Gives a slot back at once, in a frame of its own: the peer reads it
   * before the answer this side writes next, so its next loan finds the
   * slot free. (Batched to the end of the turn, a front's releases came
   * after its answers, and every pool grew to its bound.)
   */
  private owe(slot: number, generation: number): void {
    if (this.closed) return;
    const frame = new Uint8Array(9);
    const dv = new DataView(frame.buffer);
    frame[0] = RELEASE_FRAME;
    dv.setUint32(1, slot, true);
    dv.setUint32(5, generation, true);
    this.sendReleases(frame);
  }

  /** The mapped segment `place` is in, mapping it first when it is new. */
  private segment(pidfd: number, place: SlotPlace): Mapped {
    let m = this.mapped.get(place.segment);
    if (!m) {
      if (pidfd < 0) {
        throw new TensorPipeError(ErrorCode.PERMISSION_DENIED, "the peer's pool cannot be mapped: this kernel cannot pin the peer process (pidfd_open)", {
          where: "cma pool",
        });
      }
      const [id, bytes] = this.addon.attachSegment(pidfd, place.fd, this.cap);
      m = { id, bytes, views: 0, usedAt: 0 };
      this.mappedBytes += bytes;
      this.unmapIdle(Infinity, true);
      if (this.mappedBytes > this.cap) {
        this.addon.closeSegment(id);
        this.mappedBytes -= bytes;
        throw new TensorPipeError(
          ErrorCode.PROTOCOL,
          `peer's pool segments held here would pass ${this.cap} bytes: the peer holds more of its pool in messages to this side than any pool may have`,
          { where: "cma pool" },
        );
      }
      this.mapped.set(place.segment, m);
      if (!this.trimmer) {
        this.trimmer = setInterval(() => this.trim(), IDLE_MS);
        this.trimmer.unref();
      }
    }
    m.usedAt = performance.now();
    if (place.offset + place.length > m.bytes) {
      throw new TensorPipeError(ErrorCode.PROTOCOL, `peer announced ${place.length} bytes at ${place.offset} of a pool segment of ${m.bytes}`, {
        where: "cma pool",
      });
    }
    return m;
  }

  /** Unmaps the segments that no view holds and no tensor came in for IDLE_MS. */
  private trim(): void {
    this.unmapIdle(performance.now() - IDLE_MS, false);
    if (this.mapped.size === 0) {
      clearInterval(this.trimmer);
      this.trimmer = undefined;
    }
  }

  /**
   * Unmaps segments no view holds and no tensor came in since `before`,
   * oldest first (the peer dropped them, or will map them again); with
   * `toCap`, only while the mapped bytes are past the cap.
   */
  private unmapIdle(before: number, toCap: boolean): void {
    for (const [key, m] of this.mapped) {
      if (toCap && this.mappedBytes <= this.cap) return;
      if (m.views > 0 || m.usedAt > before) continue;
      this.addon.closeSegment(m.id);
      this.mapped.delete(key);
      this.mappedBytes -= m.bytes;
    }
  }
}
