/**
 * The URLs a member publishes: where it listens, as others can reach it.
 * A listener on a wildcard address (0.0.0.0, [::]) is reachable at each of
 * the machine's interface addresses, never at the wildcard itself.
 */
import { networkInterfaces } from "node:os";
import { joinHostPort, parseUrl, splitHostPort } from "@tensorpipe/core/backend";

/** The machine's addresses others may reach, IPv4 (and IPv6 for `v6`), loopback where there is no other. */
function interfaceAddresses(v6: boolean): string[] {
  const out: string[] = [];
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      if (a.internal) continue;
      if (a.family === "IPv4") out.push(a.address);
      else if (v6 && !a.address.startsWith("fe80:")) out.push(a.address);
    }
  }
  return out.length > 0 ? out : [v6 ? "::1" : "127.0.0.1"];
}

/** The wildcard host of `url` ("0.0.0.0" or "::") with its scheme and port, or undefined for any other URL. */
function wildcard(url: string): { scheme: string; host: string; port: number } | undefined {
  try {
    const { scheme, address } = parseUrl(url);
    const { host, port } = splitHostPort(address);
    return host === "0.0.0.0" || host === "::" ? { scheme, host, port } : undefined;
  } catch {
    // Not host:port (shm://...): published as it is.
    return undefined;
  }
}

/** `addresses` with each wildcard host replaced by the machine's interface addresses, in order. */
export function publishedUrls(addresses: readonly string[]): string[] {
  const out: string[] = [];
  for (const url of addresses) {
    const w = wildcard(url);
    if (!w) out.push(url);
    else for (const a of interfaceAddresses(w.host === "::")) out.push(`${w.scheme}://${joinHostPort(a, w.port)}`);
  }
  return [...new Set(out)];
}
