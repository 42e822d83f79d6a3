import { describeValue } from "./describe-value.js";
import { ErrorCode, TensorPipeError } from "./errors.js";

/**
 * A backend's checks of its options object (`new OptionChecks("MptChannelOptions")`):
 * each takes an option's name and value, passes undefined through (the
 * default applies), and refuses anything else that is not what the option
 * takes with ERR_TP_INVALID_ARG saying "MptChannelOptions.lanes must be a
 * whole number from 1 to 64, got the string \"8\"". A value from a config
 * file or an environment variable is a string: read as a boolean, "false"
 * would be true.
 */
export class OptionChecks {
  constructor(
    /** The options' type, as messages name it. */
    readonly owner: string,
  ) {}

  /** The options object itself: an object, or undefined. */
  object(options: unknown): void {
    if (options !== undefined && (typeof options !== "object" || options === null || Array.isArray(options))) this.fail("", "an object", options);
  }

  /** An integer from `min` to `max`; `unit` ("ms", "bytes") is said in the message: "a whole number of ms from 0 to ...". */
  wholeNumber(name: string, value: unknown, min: number, max = Number.MAX_SAFE_INTEGER, unit?: string): number | undefined {
    if (value === undefined) return undefined;
    if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
      this.fail(name, `a whole number${unit ? ` of ${unit}` : ""} from ${min} to ${max}`, value);
    }
    return value;
  }

  /** A bound on a count: a positive integer, or Infinity for none. */
  limit(name: string, value: unknown): number | undefined {
    if (value === undefined) return undefined;
    if (!(Number.isSafeInteger(value) && (value as number) >= 1) && value !== Infinity) this.fail(name, "a positive integer or Infinity", value);
    return value as number;
  }

  /** A number (fractions too) from `min` to `max`. */
  number(name: string, value: unknown, min: number, max: number): number | undefined {
    if (value === undefined) return undefined;
    if (typeof value !== "number" || !(value >= min && value <= max)) this.fail(name, `a number from ${min} to ${max}`, value);
    return value;
  }

  /** true or false. */
  boolean(name: string, value: unknown): boolean | undefined {
    if (value === undefined) return undefined;
    if (typeof value !== "boolean") this.fail(name, "true or false", value);
    return value;
  }

  /** A non-empty string. */
  string(name: string, value: unknown): string | undefined {
    if (value === undefined) return undefined;
    if (typeof value !== "string" || value === "") this.fail(name, "a non-empty string", value);
    return value;
  }

  /** One of `allowed`. */
  oneOf<T>(name: string, value: unknown, allowed: readonly T[]): T | undefined {
    if (value === undefined) return undefined;
    if (!allowed.includes(value as T)) this.fail(name, `one of ${allowed.map((a) => JSON.stringify(a)).join(", ")}`, value);
    return value as T;
  }

  /** ERR_TP_INVALID_ARG: `name` must be `wanted`, got `value`. */
  fail(name: string, wanted: string, value: unknown): never {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `${name ? `${this.owner}.${name}` : this.owner} must be ${wanted}, got ${describeValue(value)}`);
  }
}
