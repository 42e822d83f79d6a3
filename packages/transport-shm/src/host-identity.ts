import { readFileSync, readlinkSync } from "node:fs";

function read(path: string, how: (p: string) => string): string {
  try {
    return how(path).trim();
  } catch {
    return "?";
  }
}

/**
 * What two processes must share to meet on this machine: the same kernel
 * boot, the same network namespace (abstract Unix sockets live there) and
 * the same user namespace.
 */
export function hostIdentity(): { bootId: string; netNs: string; userNs: string; pidNs: string } {
  return {
    bootId: read("/proc/sys/kernel/random/boot_id", (p) => readFileSync(p, "utf8")),
    netNs: read("/proc/self/ns/net", readlinkSync),
    userNs: read("/proc/self/ns/user", readlinkSync),
    pidNs: read("/proc/self/ns/pid", readlinkSync),
  };
}
