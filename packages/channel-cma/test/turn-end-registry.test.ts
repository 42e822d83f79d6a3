import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { describe, expect, it } from "vitest";
import { TurnEndRegistry } from "../src/turn-end-registry.js";

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;
const turnEnd = () => new Promise((r) => setImmediate(r));

interface Held {
  id: number;
  back: boolean;
  registered: boolean;
}

describe("TurnEndRegistry", () => {
  it("registers only what is still out when the turn ends, and collects what was dropped either side of it", async () => {
    const collected: number[] = [];
    const registry = new TurnEndRegistry<Held>(
      (h) => collected.push(h.id),
      (h) => h.back,
    );
    const held = (id: number): Held => ({ id, back: false, registered: false });
    const back = held(1);
    const kept = held(2);
    const droppedNow = held(3);
    const droppedLater = held(4);
    let keptTarget: object | undefined = {};
    let laterTarget: object | undefined = {};
    registry.register({}, back);
    registry.register(keptTarget, kept);
    registry.register({}, droppedNow);
    registry.register(laterTarget, droppedLater);
    back.back = true;
    await turnEnd();
    expect([back, kept, droppedNow, droppedLater].map((h) => h.registered)).toEqual([false, true, true, true]);
    registry.unregister(kept);
    expect(kept.registered).toBe(false);
    keptTarget = undefined;
    laterTarget = undefined;
    await expect
      .poll(async () => {
        gc();
        await turnEnd();
        return collected.sort();
      })
      .toEqual([3, 4]);
  });
});
