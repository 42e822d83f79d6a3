import type { Listener } from "@tensorpipe/core";

/** Answers every message on every pipe the listener accepts with its metadata. */
export function echoMetadata(listener: Listener): void {
  (async () => {
    for await (const pipe of listener) {
      void (async () => {
        for await (const m of pipe) await pipe.write({ metadata: m.metadata });
      })().catch(() => undefined);
    }
  })();
}
