/**
 * What a value is, for an error message about a bad argument: "the string
 * \"10\"", "number NaN", "an Array", "an object (data, length)". Backends
 * use it too, so that every package says the same of the same mistake.
 */
export function describeValue(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  switch (typeof value) {
    case "string":
      return `the string ${JSON.stringify(value.length > 32 ? `${value.slice(0, 32)}...` : value)}`;
    case "number":
    case "bigint":
    case "boolean":
      return `${typeof value} ${String(value)}`;
    case "function":
      return "a function";
    case "symbol":
      return "a symbol";
  }
  if (Array.isArray(value)) return "an Array";
  if (value instanceof ArrayBuffer) return "an ArrayBuffer";
  if (typeof SharedArrayBuffer !== "undefined" && value instanceof SharedArrayBuffer) return "a SharedArrayBuffer";
  const proto = Object.getPrototypeOf(value) as { constructor?: { name?: string } } | null;
  if (proto === null || proto === Object.prototype)
    return `an object (${
      Object.keys(value as object)
        .slice(0, 4)
        .join(", ") || "no keys"
    })`;
  return `an instance of ${proto.constructor?.name || "an anonymous class"}`;
}
