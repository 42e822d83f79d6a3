import { describe, expect, it } from "vitest";
import { HandshakeWaits, SILENT_GRACE_MS, STALLED_GRACE_MS } from "../src/handshake-waits.js";
import type { Connection } from "../src/transport.js";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const connection = (pendingInput = false) => ({ hasPendingInput: () => pendingInput }) as unknown as Connection;

describe("handshake waits", () => {
  it("count a wait only while this loop sat idle: a loop held by other work does not make peers stalled", async () => {
    const waits = new HandshakeWaits();
    const c = connection();
    waits.accepted(c);
    const until = performance.now() + SILENT_GRACE_MS + 100;
    while (performance.now() < until);
    expect(waits.takeOldestStalled()).toBeUndefined();
    await sleep(SILENT_GRACE_MS + 50);
    expect(waits.takeOldestStalled()).toMatchObject({ connection: c, spoke: false });
    expect(waits.size).toBe(0);
  });

  it("count a wait past three graces whatever the loop did: a peer keeping it busy does not switch the drop off", () => {
    const waits = new HandshakeWaits();
    const c = connection();
    waits.accepted(c);
    const until = performance.now() + 3 * SILENT_GRACE_MS + 50;
    while (performance.now() < until);
    expect(waits.takeOldestStalled()).toMatchObject({ connection: c, spoke: false });
  });

  it("never take a connection whose bytes wait unread, however long", async () => {
    const waits = new HandshakeWaits();
    const c = connection(true);
    waits.accepted(c);
    waits.spoke(c);
    await sleep(STALLED_GRACE_MS + 100);
    expect(waits.takeOldestStalled()).toBeUndefined();
  });

  it("take an answered connection past its grace though bytes wait on it: they are not the handshake's", async () => {
    const waits = new HandshakeWaits();
    const c = connection(true);
    waits.accepted(c);
    waits.spoke(c);
    waits.answeredOn(c);
    await sleep(STALLED_GRACE_MS + 100);
    expect(waits.takeOldestStalled()).toMatchObject({ connection: c, spoke: true });
  });

  it("give a handshake under way longer than a silent connection, and take the oldest first", async () => {
    const waits = new HandshakeWaits();
    const [spoke, silent, unread] = [connection(), connection(), connection(true)];
    waits.accepted(spoke);
    waits.spoke(spoke);
    waits.accepted(unread);
    waits.accepted(silent);
    await sleep(SILENT_GRACE_MS + 50);
    // A first frame waiting unread is a peer that spoke.
    expect(waits.takeOldestStalled()).toMatchObject({ connection: silent, spoke: false });
    expect(waits.takeOldestStalled()).toBeUndefined();
    await sleep(STALLED_GRACE_MS - SILENT_GRACE_MS + 150);
    expect(waits.takeOldestStalled()).toMatchObject({ connection: spoke, spoke: true, waited: expect.any(Number) });
    waits.done(unread);
    expect(waits.size).toBe(0);
    expect(waits.nextCheckIn()).toBeUndefined();
  });
});
