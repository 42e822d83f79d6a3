import { Nop } from "./prefixes.js";

const utf8 = new TextEncoder();
const EMPTY: Uint8Array = Buffer.alloc(0);

/**
 * Appends libnop-encoded values to a growable buffer. A writer may be
 * reused frame after frame (reset, write, finish): a hot path then encodes
 * with no allocation at all, as long as whoever took the last frame lets go
 * of it before the next reset (else say so with hold()).
 */
export class NopWriter {
  private buf!: Uint8Array;
  private view!: DataView;
  private pos = 0;
  // Never undefined: finish() compares lengths, which V8 then keeps as
  // small integers on every pipe (a deopt on each new pipe otherwise).
  private last: Uint8Array = EMPTY;
  private held = false;

  constructor(initialCapacity = 256) {
    this.use(Buffer.allocUnsafe(initialCapacity));
  }

  // allocUnsafe carves small buffers out of Node's shared pool: no
  // ArrayBuffer per encoded frame. Every byte returned is written first.
  private use(buf: Uint8Array): void {
    this.buf = buf;
    this.view = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
    this.last = EMPTY;
  }

  private reserve(n: number): void {
    if (this.pos + n <= this.buf.length) return;
    let cap = this.buf.length * 2;
    while (cap < this.pos + n) cap *= 2;
    const next = Buffer.allocUnsafe(cap);
    next.set(this.buf.subarray(0, this.pos));
    this.use(next);
  }

  /** Starts a new frame, in the same memory unless the last frame is held. */
  reset(): this {
    if (this.held) this.use(Buffer.allocUnsafe(this.buf.length));
    this.held = false;
    this.pos = 0;
    return this;
  }

  /** The last frame finish() returned is still in use: the next one goes elsewhere. */
  hold(): void {
    this.held = true;
  }

  /** Copies `bytes` as they are: a value encoded once ahead of time. */
  raw(bytes: Uint8Array): this {
    this.reserve(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
    return this;
  }

  /** Appends one raw byte. */
  byte(b: number): this {
    this.reserve(1);
    this.buf[this.pos++] = b;
    return this;
  }

  /** Unsigned integer in its smallest form. */
  uint(value: number | bigint): this {
    if (typeof value === "number" && Number.isInteger(value) && value >= 0 && value <= 0xffffffff) {
      if (value <= 0x7f) return this.byte(value);
      this.reserve(5);
      if (value <= 0xff) {
        this.buf[this.pos++] = Nop.U8;
        this.buf[this.pos++] = value;
      } else if (value <= 0xffff) {
        this.buf[this.pos++] = Nop.U16;
        this.view.setUint16(this.pos, value, true);
        this.pos += 2;
      } else {
        this.buf[this.pos++] = Nop.U32;
        this.view.setUint32(this.pos, value, true);
        this.pos += 4;
      }
      return this;
    }
    const v = BigInt(value);
    if (v < 0n) throw new RangeError(`unsigned value ${v} is negative`);
    if (v <= 0xffffffffn) return this.uint(Number(v));
    if (v > 0xffffffffffffffffn) throw new RangeError(`unsigned value ${v} exceeds 64 bits`);
    this.reserve(9);
    this.buf[this.pos++] = Nop.U64;
    this.view.setBigUint64(this.pos, v, true);
    this.pos += 8;
    return this;
  }

  /** Signed integer in its smallest form. */
  int(value: number): this {
    if (!Number.isInteger(value)) throw new RangeError(`${value} is not an integer`);
    if (value >= 0 && value <= 0x7f) return this.byte(value);
    if (value >= -64 && value < 0) return this.byte(value & 0xff);
    if (value >= -0x80 && value <= 0x7f) {
      this.reserve(2);
      this.buf[this.pos++] = Nop.I8;
      this.view.setInt8(this.pos++, value);
    } else if (value >= -0x8000 && value <= 0x7fff) {
      this.reserve(3);
      this.buf[this.pos++] = Nop.I16;
      this.view.setInt16(this.pos, value, true);
      this.pos += 2;
    } else if (value >= -0x80000000 && value <= 0x7fffffff) {
      this.reserve(5);
      this.buf[this.pos++] = Nop.I32;
      this.view.setInt32(this.pos, value, true);
      this.pos += 4;
    } else {
      this.reserve(9);
      this.buf[this.pos++] = Nop.I64;
      this.view.setBigInt64(this.pos, BigInt(value), true);
      this.pos += 8;
    }
    return this;
  }

  /** A string: prefix, length, UTF-8 bytes. */
  string(s: string): this {
    const n = s.length;
    if (n === 0) return this.byte(Nop.String).byte(0);
    this.byte(Nop.String);
    // Short ASCII, what metadata mostly is, is copied as it is checked:
    // TextEncoder's fresh array per string cost about 0.4 us a message on
    // each side of a pipe.
    if (n <= 0x7f) {
      this.reserve(1 + n);
      const buf = this.buf;
      const at = this.pos + 1;
      let i = 0;
      for (; i < n; i++) {
        const c = s.charCodeAt(i);
        if (c > 0x7f) break;
        buf[at + i] = c;
      }
      if (i === n) {
        buf[this.pos] = n;
        this.pos = at + n;
        return this;
      }
    }
    const bytes = utf8.encode(s);
    this.uint(bytes.length);
    this.reserve(bytes.length);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.length;
    return this;
  }

  /** A structure of `memberCount` members; the members follow. */
  structure(memberCount: number): this {
    return this.byte(Nop.Structure).uint(memberCount);
  }

  /** An array of `count` elements; the elements follow. */
  array(count: number): this {
    return this.byte(Nop.Array).uint(count);
  }

  /** A map of `count` entries; each key and value follow. */
  map(count: number): this {
    return this.byte(Nop.Map).uint(count);
  }

  /** A variant's alternative `index`; its value follows. */
  variant(index: number): this {
    return this.byte(Nop.Variant).int(index);
  }

  /** An empty optional. */
  empty(): this {
    return this.byte(Nop.Empty);
  }

  /** std::vector<uint64_t>: byte count, then raw little-endian values. */
  u64Vector(values: readonly (number | bigint)[]): this {
    this.byte(Nop.Binary).uint(values.length * 8);
    this.reserve(values.length * 8);
    for (const v of values) {
      this.view.setBigUint64(this.pos, BigInt(v), true);
      this.pos += 8;
    }
    return this;
  }

  /** The frame written since the last reset: the same view when its length has not changed. */
  finish(): Uint8Array {
    if (this.last.length !== this.pos) this.last = this.buf.subarray(0, this.pos);
    return this.last;
  }
}
