import { readFileSync, readlinkSync } from "node:fs";

function read(path: string, how: (p: string) => string): string {
  try {
    return how(path).trim();
  } catch {
    return "?";
  }
}

/**
 * What says two processes are on one machine and can reach each other's
 * memory: the kernel boot and the namespaces (network for abstract Unix
 * sockets, pid for process_vm_readv, user for both).
 */
export interface HostIdentity {
  /** This boot of this machine (/proc/sys/kernel/random/boot_id). */
  readonly bootId: string;
  /** The network namespace (the /proc/self/ns/net link). */
  readonly netNs: string;
  /** The user namespace. */
  readonly userNs: string;
  /** The pid namespace. */
  readonly pidNs: string;
}

/** Read once: a process keeps its boot and its namespaces, and every handshake asks for them. */
let identity: HostIdentity | undefined;

/** This process's {@link HostIdentity}. */
export function hostIdentity(): HostIdentity {
  identity ??= {
    bootId: read("/proc/sys/kernel/random/boot_id", (p) => readFileSync(p, "utf8")),
    netNs: read("/proc/self/ns/net", readlinkSync),
    userNs: read("/proc/self/ns/user", readlinkSync),
    pidNs: read("/proc/self/ns/pid", readlinkSync),
  };
  return identity;
}
