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
export function hostIdentity(): {
  /** This boot of this machine (/proc/sys/kernel/random/boot_id). */
  bootId: string;
  /** The network namespace (the /proc/self/ns/net link). */
  netNs: string;
  /** The user namespace. */
  userNs: string;
  /** The pid namespace. */
  pidNs: string;
} {
  return {
    bootId: read("/proc/sys/kernel/random/boot_id", (p) => readFileSync(p, "utf8")),
    netNs: read("/proc/self/ns/net", readlinkSync),
    userNs: read("/proc/self/ns/user", readlinkSync),
    pidNs: read("/proc/self/ns/pid", readlinkSync),
  };
}
