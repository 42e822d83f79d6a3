/**
 * What a backend package exports for registries (the CLI's, a user's
 * own): what it is, its default priority, and how to make one. Every
 * backend package exports one as `backend`, and a register helper made
 * with registerBackend().
 */
import type { ChannelContext } from "./channel.js";
import type { Context } from "./context.js";
import { describeValue } from "./describe-value.js";
import { ErrorCode, TensorPipeError } from "./errors.js";
import type { TransportContext } from "./transport.js";

/** A transport package's `backend`. */
export interface TransportBackend<Options extends object = object, Made extends TransportContext = TransportContext> {
  /** A transport. */
  readonly kind: "transport";
  /** The name it registers under (and the URL scheme it listens on). */
  readonly name: string;
  /** Its default priority: higher wins negotiation. */
  readonly priority: number;
  /** Makes one; options it does not know are ignored. */
  create(options?: Options): Made;
  /**
   * A URL to listen on with it, on `host` where it takes a network address
   * (`uv://127.0.0.1:0`, `shm://`): what `tensorpipe peer` listens on.
   * Without it a tool knows no address for it and listens with the others.
   */
  listenUrl?(host: string): string;
}

/** A channel package's `backend`. */
export interface ChannelBackend<Options extends object = object, Made extends ChannelContext = ChannelContext> {
  /** A channel. */
  readonly kind: "channel";
  /** The name it registers under. */
  readonly name: string;
  /** Its default priority: higher wins negotiation. */
  readonly priority: number;
  /** Makes one; options it does not know are ignored. */
  create(options?: Options): Made;
}

/** Either kind of backend. */
export type BackendDescriptor = TransportBackend<object> | ChannelBackend<object>;

/** Whether `value` is a backend package's `backend` export. */
export function isBackendDescriptor(value: unknown): value is BackendDescriptor {
  const b = value as Partial<BackendDescriptor> | undefined;
  return (
    typeof b === "object" &&
    b !== null &&
    (b.kind === "transport" || b.kind === "channel") &&
    typeof b.name === "string" &&
    typeof b.priority === "number" &&
    typeof b.create === "function"
  );
}

/** Makes `backend` with `options` and registers it with `context`, at its default priority unless told. */
export function registerBackend<O extends object, M extends TransportContext>(
  context: Context,
  backend: TransportBackend<O, M>,
  options?: O,
  priority?: number,
): M;
export function registerBackend<O extends object, M extends ChannelContext>(context: Context, backend: ChannelBackend<O, M>, options?: O, priority?: number): M;
export function registerBackend(
  context: Context,
  backend: TransportBackend<object> | ChannelBackend<object>,
  options?: object,
  priority = backend.priority,
): TransportContext | ChannelContext {
  const registering = `registering the ${backend.name} ${backend.kind}`;
  if (typeof (context as Partial<Context> | null)?.registerChannel !== "function") {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `${registering}: context must be a Context (new Context()), got ${describeValue(context)}`);
  }
  if (options !== undefined && (typeof options !== "object" || options === null || Array.isArray(options))) {
    throw new TensorPipeError(ErrorCode.INVALID_ARG, `${registering}: options must be an object of its options, or left out; got ${describeValue(options)}`);
  }
  if (backend.kind === "transport") {
    const made = backend.create(options);
    context.registerTransport(priority, backend.name, made);
    return made;
  }
  const made = backend.create(options);
  context.registerChannel(priority, backend.name, made);
  return made;
}
