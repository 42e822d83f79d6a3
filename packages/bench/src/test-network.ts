/**
 * Test hosts on one machine: network namespaces joined by veth pairs to a
 * bridge namespace, with optional packet loss (nftables), delay (netem,
 * where the kernel has it) and link cuts. Needs root (or CAP_NET_ADMIN);
 * `TestNetwork.unavailable()` says why when it cannot work here.
 */
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";

function run(args: string[], input?: string): string {
  return execFileSync(args[0]!, args.slice(1), { input, stdio: ["pipe", "pipe", "pipe"] }).toString();
}

function tryRun(args: string[], input?: string): boolean {
  try {
    run(args, input);
    return true;
  } catch {
    return false;
  }
}

export interface LinkShape {
  /** Percent of packets dropped, each way (nftables). */
  lossPercent?: number;
  /** One-way delay in ms (netem; not every kernel has it). */
  delayMs?: number;
}

export interface TestHost {
  name: string;
  namespace: string;
  /** The host's IPv4 address on the test network. */
  address: string;
  /** The host-side interface. */
  device: string;
}

export class TestNetwork {
  readonly hosts: TestHost[] = [];
  /** What of the requested link shape this kernel could apply. */
  readonly applied: string[] = [];
  private readonly prefix = `tp${randomBytes(3).toString("hex")}`;
  private readonly bridgeNs = `${this.prefix}-sw`;

  /** null when test networks can be made here, else why not. */
  static unavailable(): string | null {
    if (process.platform !== "linux") return "network namespaces need Linux";
    if (process.getuid?.() !== 0) return "making network namespaces needs root";
    const probe = `tpprobe${randomBytes(3).toString("hex")}`;
    if (!tryRun(["ip", "netns", "add", probe])) return "`ip netns add` failed (no iproute2, or no CAP_SYS_ADMIN)";
    tryRun(["ip", "netns", "del", probe]);
    return null;
  }

  /** Whether the kernel can delay packets (sch_netem). */
  static canDelay(): boolean {
    const probe = `tpprobe${randomBytes(3).toString("hex")}`;
    if (!tryRun(["ip", "netns", "add", probe])) return false;
    try {
      return tryRun(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]);
    } finally {
      tryRun(["ip", "netns", "del", probe]);
    }
  }

  static canDrop(): boolean {
    return tryRun(["nft", "--version"]);
  }

  static create(count: number, shape: LinkShape = {}): TestNetwork {
    const net = new TestNetwork();
    try {
      run(["ip", "netns", "add", net.bridgeNs]);
      run(["ip", "-n", net.bridgeNs, "link", "add", "br0", "type", "bridge"]);
      run(["ip", "-n", net.bridgeNs, "link", "set", "br0", "up"]);
      for (let i = 0; i < count; i++) net.addHost(i, shape);
    } catch (e) {
      net.destroy();
      throw e;
    }
    return net;
  }

  private addHost(i: number, shape: LinkShape): void {
    const name = String.fromCharCode(97 + i);
    const namespace = `${this.prefix}-${name}`;
    const device = `eth${i}`;
    const port = `${this.prefix}p${i}`;
    const address = `10.231.${(this.prefix.charCodeAt(3) % 200) + 1}.${i + 1}`;
    run(["ip", "netns", "add", namespace]);
    run(["ip", "link", "add", device + this.prefix, "type", "veth", "peer", "name", port]);
    run(["ip", "link", "set", device + this.prefix, "netns", namespace]);
    run(["ip", "link", "set", port, "netns", this.bridgeNs]);
    run(["ip", "-n", namespace, "link", "set", device + this.prefix, "name", device]);
    // Link-local addresses usable at once, without duplicate detection.
    run(["ip", "netns", "exec", namespace, "sysctl", "-qw", `net.ipv6.conf.${device}.accept_dad=0`]);
    run(["ip", "-n", namespace, "addr", "add", `${address}/24`, "dev", device]);
    run(["ip", "-n", namespace, "link", "set", device, "up"]);
    run(["ip", "-n", namespace, "link", "set", "lo", "up"]);
    run(["ip", "-n", this.bridgeNs, "link", "set", port, "master", "br0"]);
    run(["ip", "-n", this.bridgeNs, "link", "set", port, "up"]);
    if (shape.delayMs) {
      if (tryRun(["ip", "netns", "exec", namespace, "tc", "qdisc", "add", "dev", device, "root", "netem", "delay", `${shape.delayMs}ms`])) {
        this.applied.push(`${name}: ${shape.delayMs} ms delay`);
      }
    }
    if (shape.lossPercent) {
      const rule = `table inet tploss { chain out { type filter hook output priority 0; numgen random mod 1000 < ${Math.round(shape.lossPercent * 10)} drop; }; }`;
      if (tryRun(["ip", "netns", "exec", namespace, "nft", "-f", "-"], rule)) this.applied.push(`${name}: ${shape.lossPercent}% loss`);
    }
    this.hosts.push({ name, namespace, address, device });
  }

  host(name: string): TestHost {
    const h = this.hosts.find((x) => x.name === name);
    if (!h) throw new Error(`no host ${name}`);
    return h;
  }

  /** The host's IPv6 link-local address, with its scope. */
  linkLocal(name: string): string {
    const h = this.host(name);
    const out = run(["ip", "-n", h.namespace, "-6", "-o", "addr", "show", "dev", h.device, "scope", "link"]);
    const m = /inet6 (fe80::[0-9a-f:]+)\//.exec(out);
    if (!m) throw new Error(`${h.name} has no link-local address`);
    return `${m[1]}%${h.device}`;
  }

  /** Runs a command on a host. */
  spawn(name: string, command: string, args: string[]): ChildProcess {
    return spawn("ip", ["netns", "exec", this.host(name).namespace, command, ...args], { stdio: ["pipe", "pipe", "inherit"] });
  }

  /** Unplugs a host: its packets go nowhere, nothing tells its peers. */
  cut(name: string): void {
    const h = this.host(name);
    const port = `${this.prefix}p${this.hosts.indexOf(h)}`;
    run(["ip", "-n", this.bridgeNs, "link", "set", port, "down"]);
  }

  destroy(): void {
    for (const h of this.hosts) tryRun(["ip", "netns", "del", h.namespace]);
    tryRun(["ip", "netns", "del", this.bridgeNs]);
  }
}
