/**
 * The node:diagnostics_channel channels the library publishes on, as Node
 * makes them; diagnostics.ts gives them to users typed by their messages.
 * Publishers import these, so that the types need not import publishers.
 */
import diagnostics_channel from "node:diagnostics_channel";

/** The channels, by what they report. */
export const channels = {
  /** `tensorpipe:pipe:open`. */
  pipeOpen: diagnostics_channel.channel("tensorpipe:pipe:open"),
  /** `tensorpipe:pipe:close`. */
  pipeClose: diagnostics_channel.channel("tensorpipe:pipe:close"),
  /** `tensorpipe:listener:connectionError`. */
  listenerError: diagnostics_channel.channel("tensorpipe:listener:connectionError"),
  /** `tensorpipe:message:write`. */
  messageWrite: diagnostics_channel.channel("tensorpipe:message:write"),
  /** `tensorpipe:message:read`. */
  messageRead: diagnostics_channel.channel("tensorpipe:message:read"),
  /** `tensorpipe:message:done`. */
  messageDone: diagnostics_channel.channel("tensorpipe:message:done"),
} as const;
