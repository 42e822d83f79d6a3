/**
 * What tests of many small contexts share: contexts closed after each
 * test, and a channel that cannot run here, for paths and reports to pass
 * over.
 */
import type { Context } from "@tensorpipe/core";
import { notViable } from "@tensorpipe/core/backend";
import { afterEach } from "vitest";
import { createContext } from "@tensorpipe/bench";

/** Closes, after each test of the calling file, what `closeLater` was given, newest first. */
export function closedAfterEach(): { closeLater(close: () => unknown): void; context(options?: Parameters<typeof createContext>[0]): Promise<Context> } {
  const closers: (() => unknown)[] = [];
  afterEach(async () => {
    for (const c of closers.splice(0).reverse()) await c();
  });
  return {
    closeLater: (close) => closers.push(close),
    async context(options) {
      const c = await createContext(options);
      closers.push(() => c.close());
      return c;
    },
  };
}

/** Registers on `c` a channel named `name` that cannot run here, for `reason`. */
export function registerUnrunnable(c: Context, name: string, reason: string, priority = 5000): void {
  c.registerChannel(priority, name, {
    isViable: () => notViable(reason),
    deviceDescriptors: () => [],
    numConnectionsNeeded: () => 1,
    canCommunicateWithRemote: () => false,
    createChannel: () => {
      throw new Error("never");
    },
    close: async () => {},
  });
}
