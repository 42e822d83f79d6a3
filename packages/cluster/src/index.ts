/**
 * @tensorpipe/cluster: members that find each other by name across
 * machines. join() a cluster with a store (etcd, or the embedded
 * registry), read members() and changes(), and open pipes by name.
 */
export { join, Member, type JoinOptions, type MemberEvents } from "./member.js";
export type { MembershipChange, LeaveReason } from "./membership.js";
export type { MemberRecord } from "./record.js";
export { MAX_RECORD_BYTES } from "./record.js";
export type { ClusterStore, StoreClaim, ClaimEvents, StoreFollower, StoreRecord, StoreChange } from "./store.js";
export { etcdStore, type EtcdStoreOptions } from "./etcd-store.js";
export { serveRegistry, Registry, type RegistryOptions } from "./registry.js";
export { registryStore, type RegistryStoreOptions } from "./registry-store.js";
export { clusterDiagnostics, type ClusterChangeMessage, type ClusterStoreMessage, type ClusterInvalidRecordMessage } from "./diagnostics.js";
