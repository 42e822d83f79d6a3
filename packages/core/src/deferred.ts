/** A promise with its resolve and reject at hand, for operations completed from callbacks. */
export class Deferred<T> {
  /** Settles when resolve or reject is called. */
  readonly promise: Promise<T>;
  /** Fulfils the promise. */
  resolve!: (value: T | PromiseLike<T>) => void;
  /** Rejects the promise. */
  reject!: (reason: unknown) => void;

  constructor() {
    this.promise = new Promise<T>((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
  }
}
