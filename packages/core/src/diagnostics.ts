/**
 * node:diagnostics_channel channels that tools (APM agents, tests, a user's
 * own metrics) subscribe to without patching anything. Messages are built
 * only while a channel has subscribers.
 *
 * | channel                               | message                        |
 * | ------------------------------------- | ------------------------------ |
 * | `tensorpipe:pipe:open`                | {@link PipeOpenMessage}         |
 * | `tensorpipe:pipe:close`               | {@link PipeCloseMessage}        |
 * | `tensorpipe:listener:connectionError` | {@link ListenerErrorMessage}    |
 * | `tensorpipe:message:write`            | {@link MessageSizesMessage}     |
 * | `tensorpipe:message:read`             | {@link MessageSizesMessage}     |
 * | `tensorpipe:message:done`             | {@link MessageDoneMessage}      |
 */
import type { ListenerErrorMessage } from "./listener.js";
import type { MessageDoneMessage, MessageSizesMessage, PipeCloseMessage, PipeOpenMessage } from "./pipe/observer.js";
import { channels } from "./diagnostic-channels.js";

export type { ListenerErrorMessage } from "./listener.js";
export type { MessageDoneMessage, MessageSizesMessage, PipeCloseMessage, PipeOpenMessage } from "./pipe/observer.js";

/** A diagnostics_channel channel whose messages are all of type `M`. */
export interface TypedChannel<M> {
  /** The channel's name ("tensorpipe:pipe:open", ...). */
  readonly name: string | symbol;
  /** Whether anyone listens: messages are built only then. */
  readonly hasSubscribers: boolean;
  /** Calls `onMessage` with every message published from now on. */
  subscribe(onMessage: (message: M, name: string | symbol) => void): void;
  /** Stops calling `onMessage`; false if it was not subscribed. */
  unsubscribe(onMessage: (message: M, name: string | symbol) => void): boolean;
  /** Hands `message` to every subscriber. */
  publish(message: M): void;
}

/** The channels, by what they report, typed by their messages (Node types every message `unknown`). */
export const diagnostics = channels as unknown as {
  /** `tensorpipe:pipe:open`. */
  readonly pipeOpen: TypedChannel<PipeOpenMessage>;
  /** `tensorpipe:pipe:close`. */
  readonly pipeClose: TypedChannel<PipeCloseMessage>;
  /** `tensorpipe:listener:connectionError`. */
  readonly listenerError: TypedChannel<ListenerErrorMessage>;
  /** `tensorpipe:message:write`. */
  readonly messageWrite: TypedChannel<MessageSizesMessage>;
  /** `tensorpipe:message:read`. */
  readonly messageRead: TypedChannel<MessageSizesMessage>;
  /** `tensorpipe:message:done`. */
  readonly messageDone: TypedChannel<MessageDoneMessage>;
};
