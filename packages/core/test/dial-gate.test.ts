import { describe, expect, it } from "vitest";
import { DialGate } from "../src/dial-gate.js";

describe("DialGate", () => {
  it("lets `limit` in at once and the rest in order as turns are given back", async () => {
    const gate = new DialGate(2);
    const order: number[] = [];
    const leaves = await Promise.all([gate.enter(), gate.enter()]);
    const later = [3, 4, 5].map((n) =>
      gate.enter().then((leave) => {
        order.push(n);
        return leave;
      }),
    );
    await new Promise((r) => setImmediate(r));
    expect(order).toEqual([]);
    leaves[0]!();
    const third = await later[0]!;
    expect(order).toEqual([3]);
    leaves[1]!();
    third();
    await Promise.all(later.slice(1));
    expect(order).toEqual([3, 4, 5]);
  });

  it("takes a waiter whose signal aborts out of the queue, with the signal's reason", async () => {
    const gate = new DialGate(1);
    const leave = await gate.enter();
    const controller = new AbortController();
    const waiting = gate.enter(controller.signal);
    const next = gate.enter();
    controller.abort(new Error("gave up"));
    await expect(waiting).rejects.toThrow("gave up");
    leave();
    // The turn goes to the next waiter, not to the one that left.
    (await next)();
    (await gate.enter())();
  });
});
