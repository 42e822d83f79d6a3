/**
 * What a member publishes on node:diagnostics_channel, and its debug log
 * (NODE_DEBUG=tensorpipe:cluster, or tensorpipe for every section).
 * Messages are built only while a channel has a subscriber.
 */
import diagnostics_channel from "node:diagnostics_channel";
import type { TensorPipeError, TypedChannel } from "@tensorpipe/core";
import { debugLog } from "@tensorpipe/core/backend";
import type { Member } from "./member.js";
import type { MembershipChange } from "./membership.js";

export const log = debugLog("cluster");

/** `tensorpipe:cluster:change`: another member joined, changed its record, or left. */
export interface ClusterChangeMessage {
  readonly member: Member;
  readonly change: MembershipChange;
}

/** `tensorpipe:cluster:store`: a member's store went away (`error`) or came back (`error` undefined). */
export interface ClusterStoreMessage {
  readonly member: Member;
  readonly error: TensorPipeError | undefined;
}

/** `tensorpipe:cluster:invalidRecord`: a record in the store that is not a member's, ignored. */
export interface ClusterInvalidRecordMessage {
  readonly member: Member;
  readonly error: TensorPipeError;
}

/** The cluster's channels, typed by their messages. */
export const clusterDiagnostics = {
  /** `tensorpipe:cluster:change`. */
  change: diagnostics_channel.channel("tensorpipe:cluster:change") as unknown as TypedChannel<ClusterChangeMessage>,
  /** `tensorpipe:cluster:store`. */
  store: diagnostics_channel.channel("tensorpipe:cluster:store") as unknown as TypedChannel<ClusterStoreMessage>,
  /** `tensorpipe:cluster:invalidRecord`. */
  invalidRecord: diagnostics_channel.channel("tensorpipe:cluster:invalidRecord") as unknown as TypedChannel<ClusterInvalidRecordMessage>,
} as const;
