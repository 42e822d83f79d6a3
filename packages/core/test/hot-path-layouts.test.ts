/**
 * Objects of the hot path keep the layout (V8's hidden class, or an
 * array's elements kind) they start with. A layout that changes under
 * traffic (a count past 2^30, a first double in an array of small
 * integers) makes V8 throw away the optimized code of everything that
 * touched the object, in every pipe, thousands of messages after a warm-up.
 */
import { setFlagsFromString } from "node:v8";
import { describe, expect, it } from "vitest";
import { FlightRecorder } from "../src/flight-recorder.js";
import { PipeCounters } from "../src/stats.js";

// V8's own test hook: whether two objects share a hidden class.
setFlagsFromString("--allow-natives-syntax");
const haveSameMap = new Function("a", "b", "return %HaveSameMap(a, b)") as (a: object, b: object) => boolean;

describe("PipeCounters", () => {
  it("keeps one layout for every pipe when a count passes 2^30", () => {
    const big = new PipeCounters();
    const fresh = new PipeCounters();
    const bigChannel = big.channel("cma");
    const freshChannel = fresh.channel("cma");
    big.messagesSent += 2 ** 31;
    big.bytesSent += 2 ** 31;
    big.bytesReceived += 2 ** 31;
    bigChannel.bytesSent += 2 ** 31;
    bigChannel.tensorsReceived += 2 ** 31;
    expect(haveSameMap(big, fresh)).toBe(true);
    expect(haveSameMap(bigChannel, freshChannel)).toBe(true);
  });

  it("reads 0, not -0, before anything is counted", () => {
    const counters = new PipeCounters();
    counters.channel("basic");
    const s = counters.snapshot();
    for (const n of [s.messagesSent, s.messagesReceived, s.bytesSent, s.bytesReceived, ...Object.values(s.channels.basic!)]) {
      expect(Object.is(n, 0)).toBe(true);
    }
  });
});

describe("FlightRecorder", () => {
  it("keeps the layout of its in-flight starts when a write or read waits", () => {
    const starts = (r: FlightRecorder) => r as unknown as { writeStarts: number[]; readStarts: number[] };
    const waited = new FlightRecorder(16);
    const fresh = new FlightRecorder(16);
    waited.write(8, true);
    waited.read(8, true);
    expect(haveSameMap(starts(waited).writeStarts, starts(fresh).writeStarts)).toBe(true);
    expect(haveSameMap(starts(waited).readStarts, starts(fresh).readStarts)).toBe(true);
  });
});
