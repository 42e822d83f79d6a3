/**
 * A first-in first-out queue over an array that grows and never shrinks:
 * unlike an Array used with push() and shift(), a queue that goes between
 * empty and a few entries, message after message, allocates nothing.
 */
export class Fifo<T> {
  private items: (T | undefined)[] = new Array<T | undefined>(4);
  private head = 0;
  private count = 0;

  get length(): number {
    return this.count;
  }

  push(item: T): void {
    if (this.count === this.items.length) {
      const bigger = new Array<T | undefined>(this.items.length * 2);
      for (let i = 0; i < this.count; i++) bigger[i] = this.items[(this.head + i) % this.items.length];
      this.items = bigger;
      this.head = 0;
    }
    this.items[(this.head + this.count) % this.items.length] = item;
    this.count++;
  }

  /** The oldest entry, taken out; undefined when empty. */
  shift(): T | undefined {
    if (this.count === 0) return undefined;
    const item = this.items[this.head];
    this.items[this.head] = undefined;
    this.head = (this.head + 1) % this.items.length;
    this.count--;
    return item;
  }

  /** The oldest entry, left in. */
  peek(): T | undefined {
    return this.count === 0 ? undefined : this.items[this.head];
  }

  /** Takes `item` out wherever it is; false when it was not there. */
  remove(item: T): boolean {
    for (let i = 0; i < this.count; i++) {
      if (this.items[(this.head + i) % this.items.length] !== item) continue;
      for (let j = i; j < this.count - 1; j++) this.items[(this.head + j) % this.items.length] = this.items[(this.head + j + 1) % this.items.length];
      this.items[(this.head + this.count - 1) % this.items.length] = undefined;
      this.count--;
      return true;
    }
    return false;
  }

  /** Every entry, oldest first, taken out. */
  drain(): T[] {
    const out: T[] = [];
    for (let item = this.shift(); item !== undefined; item = this.shift()) out.push(item);
    return out;
  }
}
