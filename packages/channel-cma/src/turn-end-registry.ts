/**
 * A FinalizationRegistry for memory lent a message at a time (loans,
 * views), which registers only what is still out at the end of the turn
 * of the loop it was lent in. Most loans are written, and most views
 * released, within that turn: registering and unregistering each cost
 * more than the rest of its bookkeeping. Until the turn ends the target
 * is held here, so that one dropped meanwhile is still collected after.
 */
export class TurnEndRegistry<H extends { registered: boolean }> {
  private readonly registry: FinalizationRegistry<H>;
  /** Targets and their held values, in pairs, lent this turn. */
  private pending: (object | H)[] = [];
  private scheduled = false;

  constructor(
    collected: (held: H) => void,
    /** Whether `held` came back already: it needs no registering. */
    private readonly settled: (held: H) => boolean,
  ) {
    this.registry = new FinalizationRegistry(collected);
  }

  register(target: object, held: H): void {
    this.pending.push(target, held);
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.registerStillOut());
  }

  unregister(held: H): void {
    if (!held.registered) return;
    held.registered = false;
    this.registry.unregister(held);
  }

  private registerStillOut(): void {
    this.scheduled = false;
    const pending = this.pending;
    this.pending = [];
    for (let i = 0; i < pending.length; i += 2) {
      const held = pending[i + 1] as H;
      if (this.settled(held)) continue;
      held.registered = true;
      this.registry.register(pending[i]!, held, held);
    }
  }
}
