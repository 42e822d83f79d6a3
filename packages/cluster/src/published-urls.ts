/**
 * The URLs a member publishes: where it listens, as others can reach it.
 * A listener on a wildcard address (0.0.0.0, [::]) is reachable at each of
 * the machine's interface addresses, never at the wildcard itself.
 */
import { networkInterfaces } from "node:os";

const HOST_PORT = /^([a-z][a-z0-9+.-]*):\/\/(\[[^\]]*\]|[^/:]*):(\d+)$/;

/** The machine's addresses others may reach, IPv4 (and IPv6 for `v6`), loopback last. */
function interfaceAddresses(v6: boolean): string[] {
  const out: string[] = [];
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      if (a.internal) continue;
      if (a.family === "IPv4") out.push(a.address);
      else if (v6 && !a.address.startsWith("fe80:")) out.push(`[${a.address}]`);
    }
  }
  return out.length > 0 ? out : [v6 ? "[::1]" : "127.0.0.1"];
}

/** `addresses` with each wildcard host replaced by the machine's interface addresses, in order. */
export function publishedUrls(addresses: readonly string[]): string[] {
  const out: string[] = [];
  for (const url of addresses) {
    const m = HOST_PORT.exec(url);
    const host = m?.[2];
    if (!m || (host !== "0.0.0.0" && host !== "[::]")) {
      out.push(url);
      continue;
    }
    for (const a of interfaceAddresses(host === "[::]")) out.push(`${m[1]}://${a}:${m[3]}`);
  }
  return [...new Set(out)];
}
