/**
 * A record kept on an ArrayBuffer itself, in a private field, for buffers
 * made a message at a time (loans, lent views). A WeakMap keyed by them
 * costs each set the slow path of V8's ephemeron write barrier (the map
 * is old, each buffer young) and each collection its ephemerons. Each tag
 * is made once, at module level, so that every buffer marked has one of
 * a few shapes; only buffers this library makes are marked, before
 * anyone else holds them.
 */
export interface BufferTag<T> {
  /** The record this tag keeps on `buffer`, or undefined where it keeps none. */
  get(buffer: ArrayBufferLike): T | undefined;
  /** Keeps `value` on `buffer` (a buffer of your own making, before anyone else holds it), in place of any before. */
  set(buffer: ArrayBufferLike, value: T): void;
}

/** A base class whose constructor returns the object it is given: `new` on a subclass then adds its fields to that object. */
class Returning {
  constructor(target: object) {
    // biome-ignore lint/correctness/noConstructorReturn: the point of it
    return target;
  }
}

/** A new tag: make each once, at module level, for one kind of record. */
export function bufferTag<T>(): BufferTag<T> {
  class Tagged extends Returning {
    #value: T | undefined;
    constructor(target: object, value: T) {
      super(target);
      this.#value = value;
    }
    static get(buffer: object): T | undefined {
      return #value in buffer ? (buffer as Tagged).#value : undefined;
    }
    static set(buffer: object, value: T): void {
      if (#value in buffer) (buffer as Tagged).#value = value;
      else new Tagged(buffer, value);
    }
  }
  return { get: Tagged.get, set: Tagged.set };
}
