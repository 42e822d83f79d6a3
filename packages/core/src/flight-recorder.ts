/**
 * A pipe's flight recorder: its last events (the handshake's steps, the
 * path chosen, each message's size and time, errors with their causes) in
 * a ring of fixed size, so that a pipe that fails, or one that seems stuck,
 * can say what it was doing. Recording a message writes three numbers into
 * typed arrays: no allocation, no string, on the hot path. Reading the
 * clock costs more than that (about 50 ns, 3% of an 8 B round trip over
 * shm), so only what takes time is timed: the start and end of a write or
 * read that did not finish at once, and the rare events.
 */

import { safeText } from "./peer-text.js";

/** Characters of an event's words: they may quote a peer. */
const MAX_DETAIL = 2048;

/** What an event was. */
export type FlightEventKind =
  /** A step of the handshake (dialled, offered, answered, connections opened). */
  | "handshake"
  /** The path chosen (as pipe.path says it). */
  | "path"
  /** write() took a message of `bytes`. */
  | "write"
  /** A write that did not finish at once finished, `ms` after it was taken. */
  | "written"
  /** A descriptor frame of `bytes` came. */
  | "descriptor"
  /** read() was given memory for `bytes`. */
  | "read"
  /** A read that did not finish at once finished, `ms` after read() was called. */
  | "received"
  /** An operation was refused, or the pipe failed: `detail` has the code, message and cause. */
  | "error"
  /** The pipe ended. */
  | "closed";

/** One recorded event. */
export interface FlightEvent {
  /**
   * When, in milliseconds since the epoch (performance.timeOrigin +
   * performance.now()); absent for a write, read or descriptor that
   * finished at once, which falls between the timed events around it.
   */
  readonly at?: number;
  /** What happened. */
  readonly kind: FlightEventKind;
  /** The message's payload and tensor bytes, for message events. */
  readonly bytes?: number;
  /** How long it took, for "written" and "received". */
  readonly ms?: number;
  /** In words, for the rare events. */
  readonly detail?: string;
}

// Kinds as small numbers in the ring; their names by index.
const KINDS: readonly FlightEventKind[] = ["handshake", "path", "write", "written", "descriptor", "read", "received", "error", "closed"];
const Kind = { Write: 2, Written: 3, Descriptor: 4, Read: 5, Received: 6 } as const;
type Kind = (typeof Kind)[keyof typeof Kind];

/** Events of a handshake, kept until its pipe's recorder takes them (or its error does). */
export class HandshakeEvents {
  readonly events: FlightEvent[] = [];
  /** Adds a step; `detail` is only built when `enabled` (the context records). */
  constructor(readonly enabled: boolean) {}
  add(kind: "handshake" | "path" | "error", detail: string): void {
    if (this.enabled) this.events.push({ at: performance.timeOrigin + performance.now(), kind, detail: safeText(detail, MAX_DETAIL) });
  }
}

const NO_DETAILS: (string | undefined)[] = [];

/** An empty array whose elements are unboxed doubles (an empty literal's are small integers). */
function emptyDoubles(): number[] {
  const a = [0.5];
  a.pop();
  return a;
}

/**
 * The ring of one pipe. An idle pipe holds only its handshake's events:
 * the ring is made at the first message, so that memory follows traffic.
 */
export class FlightRecorder {
  // Per event: its time, its size (or duration), its kind.
  private slots?: Float64Array;
  // Made with the slots, full length from the start: every recorder's
  // array has the same elements kind, so code V8 optimized on one pipe
  // (Context.warmUp()'s) stays valid for the next.
  private details: (string | undefined)[] = NO_DETAILS;
  /** Events recorded so far, handshake's included; the ring holds the last `capacity`. */
  private count = 0;
  // Writes and reads finish in the order they were taken: the start of each
  // still in flight, oldest first. Arrays of doubles from the start: the
  // first clock reading pushed into an empty literal (small integers)
  // changes its elements kind, and V8 drops the code that pushed it.
  private readonly writeStarts = emptyDoubles();
  private readonly readStarts = emptyDoubles();

  constructor(
    readonly capacity: number,
    private readonly earlier: readonly FlightEvent[] = [],
  ) {}

  private push(kind: number, time: number, size: number, detail: string | undefined): void {
    if (!this.slots) this.start();
    this.write3(kind, time, size, detail);
  }

  /** The ring, made at the first message, with the handshake's events in it. */
  private start(): void {
    this.slots = new Float64Array(this.capacity * 3);
    this.details = new Array<string | undefined>(this.capacity).fill(undefined);
    for (const e of this.earlier) this.write3(KINDS.indexOf(e.kind), e.at === undefined ? NaN : e.at - performance.timeOrigin, e.bytes ?? 0, e.detail);
  }

  private write3(kind: number, time: number, size: number, detail: string | undefined): void {
    const i = this.count++ % this.capacity;
    const slots = this.slots!;
    slots[3 * i] = time;
    slots[3 * i + 1] = size;
    slots[3 * i + 2] = kind;
    if (detail !== undefined || this.details[i] !== undefined) this.details[i] = detail;
  }

  /** write() took a message of `bytes`; `pending` when it did not finish at once. */
  write(bytes: number, pending: boolean): void {
    this.begin(Kind.Write, bytes, pending, this.writeStarts);
  }

  /** The oldest pending write finished. */
  written(): void {
    this.finish(Kind.Written, this.writeStarts);
  }

  /** A descriptor frame of `bytes` came. */
  descriptor(bytes: number): void {
    this.push(Kind.Descriptor, NaN, bytes, undefined);
  }

  /** read() was given memory for `bytes`; `pending` when it did not finish at once. */
  read(bytes: number, pending: boolean): void {
    this.begin(Kind.Read, bytes, pending, this.readStarts);
  }

  /** The oldest pending read finished. */
  received(): void {
    this.finish(Kind.Received, this.readStarts);
  }

  /** A write or read taken; timed only when it did not finish at once. */
  private begin(kind: Kind, bytes: number, pending: boolean, starts: number[]): void {
    if (!pending) {
      this.push(kind, NaN, bytes, undefined);
      return;
    }
    const now = performance.now();
    this.push(kind, now, bytes, undefined);
    starts.push(now);
  }

  /** The oldest pending one of `starts` finished: its duration. */
  private finish(kind: Kind, starts: number[]): void {
    const now = performance.now();
    this.push(kind, now, now - (starts.shift() ?? now), undefined);
  }

  /** A rare event, in words. */
  note(kind: "handshake" | "path" | "error" | "closed", detail: string): void {
    this.push(KINDS.indexOf(kind), performance.now(), 0, safeText(detail, MAX_DETAIL));
  }

  /** The events the ring holds, oldest first. */
  events(): FlightEvent[] {
    const slots = this.slots;
    if (!slots) return this.earlier.slice(-this.capacity);
    const out: FlightEvent[] = [];
    const n = Math.min(this.count, this.capacity);
    for (let k = this.count - n; k < this.count; k++) {
      const i = k % this.capacity;
      const kind = KINDS[slots[3 * i + 2]!]!;
      const time = slots[3 * i]!;
      const at = Number.isNaN(time) ? {} : { at: performance.timeOrigin + time };
      const size = slots[3 * i + 1]!;
      const detail = this.details[i];
      if (kind === "written" || kind === "received") out.push({ ...at, kind, ms: size });
      else if (kind === "write" || kind === "read" || kind === "descriptor") out.push({ ...at, kind, bytes: size });
      else out.push({ ...at, kind, ...(detail === undefined ? {} : { detail }) });
    }
    return out;
  }
}

/** Events in lines, for logs and bug reports: "+0.123 ms write 8 B" ("at once" where not timed). */
export function describeFlightEvents(events: readonly FlightEvent[]): string {
  const t0 = events.find((e) => e.at !== undefined)?.at ?? 0;
  return events
    .map((e) => {
      const what = e.ms !== undefined ? `${e.ms.toFixed(3)} ms` : e.bytes !== undefined ? `${e.bytes} B` : (e.detail ?? "");
      const when = e.at === undefined ? "at once" : `+${(e.at - t0).toFixed(3)} ms`;
      return `${when} ${e.kind} ${what}`;
    })
    .join("\n");
}
