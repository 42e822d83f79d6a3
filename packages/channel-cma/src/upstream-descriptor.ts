/**
 * cma's device descriptor, written as upstream TensorPipe writes its own
 * (channel/cma/context_impl.cc), so that negotiation between a Node process
 * and a C++ one on the same machine picks cma: the boot, the pid and user
 * namespaces (each link's st_dev and st_ino in hex), the real uid and gid,
 * and for each Linux security module that takes part in the ptrace check
 * (capability; yama adds nothing at scope 0) the permitted capabilities in
 * hex. Two processes with equal descriptors may read each other's memory.
 */
import { readFileSync, statSync } from "node:fs";
import { hostIdentity } from "@tensorpipe/core/backend";

function namespaceId(kind: "pid" | "user"): string {
  const st = statSync(`/proc/self/ns/${kind}`, { bigint: true });
  return `${st.dev.toString(16)}_${st.ino.toString(16)}`;
}

/** A field of /proc/self/status ("Uid", "Gid", "CapPrm"), split on whitespace. */
function statusField(status: string, name: string): string[] {
  const line = status.split("\n").find((l) => l.startsWith(`${name}:`));
  return line ? line.slice(name.length + 1).trim().split(/\s+/) : [];
}

/** The active security modules, or the two upstream assumes when securityfs is not mounted. */
function securityModules(): string[] {
  try {
    return readFileSync("/sys/kernel/security/lsm", "utf8").trim().split(",");
  } catch {
    return ["capability", "yama"];
  }
}

/** This process's cma descriptor in upstream's words; computed once per process. */
let descriptor: string | undefined;

export function upstreamCmaDescriptor(): string {
  if (descriptor !== undefined) return descriptor;
  const status = readFileSync("/proc/self/status", "utf8");
  const [uid] = statusField(status, "Uid");
  const [gid] = statusField(status, "Gid");
  let out = `cma:${hostIdentity().bootId}_${namespaceId("pid")}_${namespaceId("user")}_${uid}_${gid}`;
  for (const lsm of securityModules()) {
    if (lsm === "capability") out += `_${BigInt(`0x${statusField(status, "CapPrm")[0] ?? "0"}`).toString(16)}`;
  }
  descriptor = out;
  return out;
}
