/**
 * `tensorpipe doctor`: which backends are installed, which can work on this
 * machine and exactly why not, and the addresses the TCP transport would use.
 */
import { lookup } from "node:dns/promises";
import { readFileSync } from "node:fs";
import { arch, availableParallelism, hostname, networkInterfaces, platform } from "node:os";
import { type ContextOptions, type PathReport, type PathVerdict, deviceKey } from "@tensorpipe/core";
import { safeText } from "@tensorpipe/core/backend";
import { type BackendOptions, createContext, findBackends } from "./backends.js";

/** One backend as `tensorpipe doctor` reports it. */
export interface DoctorBackend {
  /** Transport or channel. */
  kind: "transport" | "channel";
  /** Its name. */
  name: string;
  /** The package that has it. */
  packageName: string;
  /** Whether the package is installed. */
  installed: boolean;
  /** The package's version. */
  version?: string;
  /** Its priority: the higher, the sooner a pipe takes it where both ends have it (absent where its module did not load). */
  priority?: number;
  /** Whether it can work here. */
  viable: boolean;
  /** Why not, when not viable. */
  reason?: string;
  /** Transports: who can reach whom. Channels: per device, which peers can use it. */
  domain?: string;
  /** The devices a channel serves here, with their descriptors. */
  devices?: {
    /** The device ("cpu:0"). */
    device: string;
    /** Its descriptor. */
    descriptor: string;
  }[];
  /** How it will run here, where the backend says (mpt: whether its lanes get threads). */
  note?: string;
  /** Channels that can work here: the connections each pipe opens for it. */
  connections?: number;
}

/** A network interface. */
export interface DoctorInterface {
  /** Its name ("eth0"). */
  name: string;
  /** Its addresses. */
  addresses: {
    /** The address. */
    address: string;
    /** Its family. */
    family: "IPv4" | "IPv6";
    /** The IPv6 scope (link-local addresses). */
    scopeId?: number;
  }[];
  /** Loopback. */
  internal: boolean;
}

/** What `tensorpipe doctor` finds. */
export interface DoctorReport {
  /** Node's version. */
  node: string;
  /** "linux-x64", ... */
  platform: string;
  /** Logical CPUs. */
  cpus: number;
  /** Every first-party backend, and those --backend named. */
  backends: DoctorBackend[];
  /** Modules named with --backend that gave no backend (missing, failed to load, or no `backend` export): doctor then exits 1. */
  unusableModules?: {
    /** The module as given. */
    module: string;
    /** Why. */
    reason: string;
  }[];
  /** The network interfaces. */
  interfaces: DoctorInterface[];
  /** What a peer on another machine would dial by default: this host's name, resolved. */
  hostname: {
    /** os.hostname(). */
    name: string;
    /** What it resolves to. */
    address?: string;
    /** Why it does not resolve. */
    error?: string;
    /** The interface that has that address. */
    interface?: string;
  };
  /** Yama's ptrace_scope, which decides whether cma may read a peer's memory. */
  ptraceScope?: number;
  /** What bounds how many pipes this process can hold. */
  limits: DoctorLimits;
  /** Whether at least one transport and one channel can work. */
  usable: boolean;
  /** With --peer: the path a pipe to that listener took, and why, or why none opened. */
  peer?: DoctorPeer;
}

/** A pipe tried to a listener (`tensorpipe doctor --peer URL`). */
export interface DoctorPeer {
  /** The URL dialled. */
  url: string;
  /** The pipe's path, as pipe.path says it, when one opened. */
  path?: PathReport;
  /** Why none opened: the error's code and message. */
  error?: { code: string; message: string };
}

/**
 * Opens a pipe to `url` with every backend that can run here, and tells
 * its path: which transport and channels both ends chose, and why not the
 * others, each from the end that knew (a peer in another container says
 * which namespace or capability differs).
 */
export async function tryPeer(url: string, options: BackendOptions & Pick<ContextOptions, "auth"> = {}): Promise<DoctorPeer> {
  const context = await createContext(options);
  try {
    const pipe = await context.connect(url);
    const path = pipe.path;
    pipe.close();
    return { url, path };
  } catch (e) {
    const err = e as { code?: string; message?: string };
    return { url, error: { code: err.code ?? "ERR_TP_SYSTEM", message: err.message ?? String(e) } };
  } finally {
    await context.close();
  }
}

function readNumber(path: string): number | undefined {
  try {
    return Number(readFileSync(path, "utf8").trim());
  } catch {
    return undefined;
  }
}

function interfaceOf(address: string, interfaces: readonly DoctorInterface[]): string | undefined {
  return interfaces.find((i) => i.addresses.some((a) => a.address === address))?.name;
}

/** Probes this machine: the backends installed and whether each works, and the network. */
export async function runDoctor(options: BackendOptions = {}): Promise<DoctorReport> {
  const found = await findBackends(options);
  const backends: DoctorBackend[] = found.map((b) => {
    const entry: DoctorBackend = {
      kind: b.spec.kind,
      name: b.spec.name,
      packageName: b.spec.packageName,
      installed: b.installed,
      version: b.version,
      viable: b.viability.viable,
      reason: b.viability.viable ? undefined : b.viability.reason,
    };
    if (b.create) entry.priority = b.spec.priority;
    if (b.domain !== undefined) entry.domain = b.domain;
    if (b.devices) entry.devices = b.devices.map((d) => ({ device: `${d.device.type}:${d.device.index}`, descriptor: d.descriptor }));
    if (b.lanes) entry.note = b.lanes;
    if (b.connections !== undefined) entry.connections = b.connections;
    return entry;
  });
  const interfaces: DoctorInterface[] = Object.entries(networkInterfaces()).map(([name, entries]) => ({
    name,
    internal: (entries ?? []).every((e) => e.internal),
    addresses: (entries ?? []).map((e) => ({
      address: e.address,
      family: e.family as "IPv4" | "IPv6",
      ...(e.family === "IPv6" && e.scopeid ? { scopeId: e.scopeid } : {}),
    })),
  }));
  const name = hostname();
  let host: DoctorReport["hostname"];
  try {
    const { address } = await lookup(name);
    host = { name, address, interface: interfaceOf(address, interfaces) };
  } catch (e) {
    host = { name, error: (e as { code?: string }).code ?? (e as Error).message };
  }
  const viable = (kind: string) => backends.some((b) => b.kind === kind && b.viable);
  // A module named with --backend that gave no backend is the user's mistake to see, not a backend that cannot run here.
  const unusable = (options.backends ?? []).flatMap((module) => {
    const b = found.find((f) => f.spec.packageName === module);
    return b && !b.create ? [{ module, reason: b.viability.viable ? "no backend" : b.viability.reason }] : [];
  });
  return {
    node: process.version,
    platform: `${platform()}-${arch()}`,
    cpus: availableParallelism(),
    backends,
    interfaces,
    hostname: host,
    ptraceScope: readNumber("/proc/sys/kernel/yama/ptrace_scope"),
    limits: readLimits(),
    usable: viable("transport") && viable("channel"),
    ...(unusable.length > 0 ? { unusableModules: unusable } : {}),
  };
}

/** What bounds how many pipes a process can hold here. */
export interface DoctorLimits {
  /** Open files this process may have (RLIMIT_NOFILE, which Node raises to the hard limit), and the hard limit. */
  openFiles?: { soft: number; hard: number };
  /** Memory the kernel says is available (MemAvailable), MiB. */
  availableMiB?: number;
  /** This cgroup's memory limit (memory.max), MiB, where there is one. */
  cgroupMiB?: number;
}

/**
 * Descriptors a pipe holds at each end with `channel` for its CPU tensors,
 * over either transport (each connection is one socket): one connection
 * each way for its control messages, the channel's own, and for cma the
 * pidfd that pins the peer it reads (the README's "How many pipes").
 */
export function descriptorsPerPipe(channel: DoctorBackend): number {
  return 2 + (channel.connections ?? 0) + (channel.name === "cma" ? 1 : 0);
}

function readLimits(): DoctorLimits {
  const limits: DoctorLimits = {};
  try {
    const line = readFileSync("/proc/self/limits", "utf8")
      .split("\n")
      .find((l) => l.startsWith("Max open files"));
    const [soft, hard] = line?.split(/\s+/).slice(3, 5).map(Number) ?? [];
    if (Number.isFinite(soft) && Number.isFinite(hard)) limits.openFiles = { soft: soft!, hard: hard! };
  } catch {
    // not Linux
  }
  try {
    const kib = Number(/MemAvailable:\s+(\d+)/.exec(readFileSync("/proc/meminfo", "utf8"))?.[1]);
    if (Number.isFinite(kib)) limits.availableMiB = Math.floor(kib / 1024);
  } catch {
    // not Linux
  }
  try {
    const max = readFileSync("/sys/fs/cgroup/memory.max", "utf8").trim();
    if (/^\d+$/.test(max)) limits.cgroupMiB = Math.floor(Number(max) / 2 ** 20);
  } catch {
    // no cgroup v2 limit here
  }
  return limits;
}

/** The report as a person reads it. */
export function formatDoctor(r: DoctorReport): string[] {
  const lines = [`tensorpipe doctor: Node ${r.node}, ${r.platform}, ${r.cpus} CPUs`];
  const width = Math.max(8, ...r.backends.map((b) => b.name.length + 2));
  const detail = " ".repeat(2 + width);
  for (const kind of ["transport", "channel"] as const) {
    lines.push("", `${kind}s`);
    for (const b of r.backends.filter((x) => x.kind === kind)) {
      const what = !b.installed ? "not installed" : b.viable ? "viable" : "NOT VIABLE";
      const priority = b.priority === undefined ? "" : `priority ${b.priority}`;
      lines.push(`  ${b.name.padEnd(width)}${what.padEnd(15)}${priority.padEnd(15)}${b.packageName}${b.version ? `@${b.version}` : ""}`);
      if (b.reason && b.installed) lines.push(`${detail}why: ${b.reason}`);
      if (!b.installed) lines.push(`${detail}install: npm install ${b.packageName}`);
      if (b.domain) lines.push(`${detail}domain: ${b.domain}`);
      for (const d of b.devices ?? []) lines.push(`${detail}${d.device}: ${d.descriptor}`);
      if (b.note) lines.push(`${detail}${b.note}`);
    }
  }
  lines.push("", "network interfaces (uv listens on the address you give, or on an interface's with { interface })");
  for (const i of r.interfaces) {
    const addresses = i.addresses.map((a) => (a.scopeId ? `${a.address}%${i.name}` : a.address)).join(", ");
    lines.push(`  ${i.name.padEnd(12)}${addresses}${i.internal ? "  (loopback)" : ""}`);
  }
  const external = r.interfaces.find((i) => !i.internal && i.addresses.some((a) => a.family === "IPv4"));
  const suggestion = external
    ? `give them ${external.name}'s address (${external.addresses.find((a) => a.family === "IPv4")!.address})`
    : "this machine has no external interface";
  const loopback = r.interfaces.find((i) => i.name === r.hostname.interface)?.internal;
  if (!r.hostname.address) lines.push(`  hostname ${r.hostname.name} does not resolve (${r.hostname.error}): ${suggestion}`);
  else if (loopback)
    lines.push(`  hostname ${r.hostname.name} resolves to loopback ${r.hostname.address}, which peers on other machines cannot reach: ${suggestion}`);
  else
    lines.push(
      `  hostname ${r.hostname.name} resolves to ${r.hostname.address}${r.hostname.interface ? ` (${r.hostname.interface})` : ""}: the address to give peers on other machines`,
    );
  if (r.ptraceScope !== undefined) lines.push(`  kernel.yama.ptrace_scope = ${r.ptraceScope} (decides whether cma may read a peer's memory)`);
  lines.push("", "limits (how many pipes this process can hold)");
  const files = r.limits.openFiles;
  if (files) {
    const cpuChannels = r.backends.filter((b) => b.kind === "channel" && b.viable && b.devices?.some((d) => d.device === "cpu:0"));
    const pipes = cpuChannels.map((c) => `${Math.floor(files.soft / descriptorsPerPipe(c))} with ${c.name} (${descriptorsPerPipe(c)} a pipe)`);
    lines.push(
      `  open files: ${files.soft} (hard ${files.hard}): about ${pipes.join(", ") || "no pipe"}, less what the process holds otherwise; more with ulimit -n`,
    );
    if (cpuChannels.length > 1) lines.push("    (a pipe takes the channel of highest priority that both ends have and can use)");
  }
  if (r.limits.availableMiB !== undefined) {
    const cgroup = r.limits.cgroupMiB !== undefined ? `, this cgroup's limit ${r.limits.cgroupMiB} MiB` : "";
    lines.push(
      `  memory: ${r.limits.availableMiB} MiB available${cgroup}: an idle pipe holds under 100 KiB, a busy one what it has in flight (over shm up to 2 x ringSize)`,
    );
  }
  if (r.peer) lines.push("", ...peerLines(r.peer));
  // The verdict comes last, and only from here: no line a peer sent can stand in for it.
  lines.push("");
  for (const m of r.unusableModules ?? []) lines.push(`--backend ${m.module}: NOT USABLE: ${safeText(m.reason, 1024)}`);
  lines.push(
    r.unusableModules
      ? `NOT USABLE: ${r.unusableModules.length} --backend module(s) gave no backend (above)`
      : r.usable
        ? "usable: at least one transport and one channel are viable"
        : "NOT USABLE: no viable transport or no viable channel",
  );
  if (r.peer) lines.push(r.peer.path ? `pipe to ${r.peer.url}: opened over ${r.peer.path.transport}` : `pipe to ${r.peer.url}: FAILED (${r.peer.error!.code})`);
  return lines;
}

/**
 * The pipe to --peer: what this side chose or learnt, and the peer's own
 * words quoted as the peer's, one line each, escaped and bounded (the
 * report holds at most 64 verdicts), so that a hostile listener can
 * neither forge a line of doctor's nor flood the terminal.
 */
function peerLines(peer: DoctorPeer): string[] {
  const lines = [`pipe to ${peer.url}`];
  const p = peer.path;
  if (!p) return [...lines, `  FAILED: ${peer.error!.code}: ${safeText(peer.error!.message, 8192)}`];
  const offer = (o: { transports: readonly string[]; channels: readonly string[] }) =>
    `transports ${o.transports.map((n) => safeText(n, 128)).join(", ") || "none"}; channels ${o.channels.map((n) => safeText(n, 128)).join(", ") || "none"}`;
  const pairs = p.pairs.map((c) => `${deviceKey(c.local)}->${safeText(deviceKey(c.remote), 128)} ${safeText(c.channel, 128)}`).join(", ") || "none";
  lines.push(`  ${p.side} side: transport ${p.transport}; channels ${pairs}`, `  offered here: ${offer(p.offeredHere)}`);
  lines.push(
    p.offeredThere
      ? `  offered there, as the peer says: ${offer(p.offeredThere)}`
      : "  offered there: not said (an upstream peer); what it decided is inferred",
  );
  for (const v of p.verdicts) lines.push(`  ${verdictLine(v)}`);
  return lines;
}

function verdictLine(v: PathVerdict): string {
  const what = `${v.kind} ${safeText(v.name, 128)}${v.pair ? ` ${safeText(v.pair, 128)}` : ""}`;
  if (v.by === "there") return `${what}: ${v.outcome}, the peer says: "${safeText(v.reason, 1024)}"`;
  return `${what}${v.by === "inferred" ? " (inferred)" : ""}: ${v.reason.startsWith(v.outcome) ? v.reason : `${v.outcome}: ${v.reason}`}`;
}
