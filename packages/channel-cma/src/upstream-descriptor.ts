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
  return line
    ? line
        .slice(name.length + 1)
        .trim()
        .split(/\s+/)
    : [];
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

/** Why two cma descriptors differ, field by field, with what would make them pair; undefined for a form this does not know. */
export function describeCmaMismatch(local: string, remote: string): string | undefined {
  const fields = (d: string) => (d.startsWith("cma:") ? d.slice(4).split("_") : []);
  const [here, there] = [fields(local), fields(remote)];
  if (here.length < 7 || there.length < 7) return undefined;
  const differs = (from: number, to = from + 1) => here.slice(from, to).join("_") !== there.slice(from, to).join("_");
  if (differs(0)) return "the peer runs on another machine, or another boot of this one: cma reads only processes of one machine";
  if (differs(1, 3))
    return "pid namespaces differ: run both in one (docker run --pid=host, or --pid=container:<the other>; in Kubernetes, shareProcessNamespace: true for containers of one pod)";
  if (differs(3, 5)) return "user namespaces differ: run both in one (the same --userns setting for both containers)";
  if (differs(5, 7))
    return `users differ (uid_gid ${here[5]}_${here[6]} here, ${there[5]}_${there[6]} there): cma reads only a process of the same user and group; run both as one`;
  if (differs(7, Math.max(here.length, there.length))) {
    return `permitted capabilities differ (${here.slice(7).join("_") || "none"} here, ${there.slice(7).join("_") || "none"} there): the kernel's ptrace check wants the same; give both processes the same ones (docker --cap-add / --cap-drop alike)`;
  }
  return undefined;
}
