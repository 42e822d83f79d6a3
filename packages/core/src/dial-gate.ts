/**
 * How many handshakes one context dials at once; the rest wait their turn,
 * in order. A user who opens a thousand pipes with one Promise.all would
 * otherwise have a thousand handshakes share this loop: each connection
 * then says its first frame only once the loop gets to it, hundreds of
 * milliseconds later, and a listener that bounds silent connections
 * (maxPendingHandshakes) rightly drops it.
 */
export class DialGate {
  private running = 0;
  private readonly waiting: (() => void)[] = [];

  constructor(private readonly limit: number) {}

  /** Resolves with the function that gives the turn back; a waiter whose signal aborts leaves the queue. */
  enter(signal?: AbortSignal): Promise<() => void> {
    if (this.running < this.limit) {
      this.running++;
      return Promise.resolve(this.leave);
    }
    return new Promise((resolve, reject) => {
      const go = () => {
        signal?.removeEventListener("abort", onAbort);
        this.running++;
        resolve(this.leave);
      };
      const onAbort = () => {
        const at = this.waiting.indexOf(go);
        if (at >= 0) this.waiting.splice(at, 1);
        reject(signal!.reason);
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.waiting.push(go);
    });
  }

  private readonly leave = (): void => {
    this.running--;
    this.waiting.shift()?.();
  };
}
