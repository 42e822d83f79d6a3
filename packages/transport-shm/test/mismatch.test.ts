/**
 * Two processes whose shm domains differ are told which part differs and
 * what joins them: shm needs one machine, one network namespace (its
 * abstract socket) and one user namespace; never /dev/shm nor an IPC
 * namespace.
 */
import { describe, expect, it } from "vitest";
import { ShmTransport } from "../src/index.js";

const shm = new ShmTransport();
const d = (boot: string, net: number, user: number) => `shm:${boot}:net:[${net}]:user:[${user}]`;

describe("shm's reasons when domains differ", () => {
  it("names the network namespace and the Docker and Kubernetes ways to share one", () => {
    const why = shm.describeMismatch(d("b", 1, 7), d("b", 2, 7));
    expect(why).toMatch(/^network namespaces differ: shm meets over an abstract Unix socket.*--network=host.*Kubernetes pod/);
    expect(why).not.toMatch(/user namespaces/);
  });

  it("names the user namespace", () => {
    expect(shm.describeMismatch(d("b", 1, 7), d("b", 1, 8))).toMatch(/^user namespaces differ: .*--userns=host/);
  });

  it("says another machine before anything else", () => {
    expect(shm.describeMismatch(d("b", 1, 7), d("c", 2, 8))).toMatch(/^another machine \(or boot\)[^;]*$/);
  });

  it("says nothing of what it cannot parse, or of equal domains", () => {
    expect(shm.describeMismatch(d("b", 1, 7), "upstream-shm:xyz")).toBeUndefined();
    expect(shm.describeMismatch(d("b", 1, 7), d("b", 1, 7))).toBeUndefined();
  });

  it("describes this machine's own domain in the form it parses", () => {
    expect(shm.domainDescriptor()).toMatch(/^shm:[^:]+:net:\[\d+\]:user:\[\d+\]$/);
  });
});
