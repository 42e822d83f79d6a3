import { readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import {
  type ChannelContext,
  Context,
  ErrorCode,
  TensorPipeError,
  type ContextOptions,
  type DeviceDescriptor,
  type TransportContext,
  type Viability,
  isBackendDescriptor,
  notViable,
} from "@tensorpipe/core/backend";

/** Options the CLI passes on to the backends that take them (each takes what it knows). */
export interface BackendOptions {
  /** Modules of third-party backends to load besides the first-party ones (each exports `backend`). */
  backends?: readonly string[];
  /** mpt lanes (default: its own). */
  lanes?: number;
  /** cma: copier threads for large tensors (default: its own). */
  parallelism?: number;
  /** uv: the network interface to listen and connect on. */
  interface?: string;
  /** uv: how long a silent peer may go unnoticed, in ms (see UvTransportOptions.peerTimeout). */
  peerTimeout?: number;
}

/** A backend package as the CLI found it: what its `backend` export says it is. */
export interface BackendSpec {
  /** Transport or channel. */
  kind: "transport" | "channel";
  /** The name it registers under. */
  name: string;
  /** Its npm package (or the module it was loaded from). */
  packageName: string;
  /** Its default priority: higher wins negotiation. */
  priority: number;
  /** The memory its tensors live in (channels): the CPU bench leaves the others out. */
  memory?: "cpu" | "cuda";
  /** Transports: a URL to listen on for `host`, where the backend says. */
  listenUrl?: (host: string) => string;
}

/**
 * The first-party backend packages. Each exports `backend` (kind, name,
 * default priority, create(options)); a third party's is named with
 * `--backend <module>` (BackendOptions.backends) and found the same way.
 */
export const BACKEND_PACKAGES: readonly string[] = [
  "@tensorpipe/transport-shm",
  "@tensorpipe/transport-uv",
  "@tensorpipe/channel-cuda-ipc",
  "@tensorpipe/channel-cuda-gdr",
  "@tensorpipe/channel-cuda-basic",
  "@tensorpipe/channel-cma",
  "@tensorpipe/channel-mpt",
  "@tensorpipe/channel-basic",
];

/** What a package not installed would be, by the first-party naming (transport-NAME, channel-NAME). */
function guessedSpec(packageName: string): BackendSpec {
  const m = /(transport|channel)-([^/]+)$/.exec(packageName);
  return { kind: m?.[1] === "transport" ? "transport" : "channel", name: m?.[2] ?? packageName, packageName, priority: 0 };
}

/** A backend as found on this machine. */
export interface FoundBackend {
  /** What it is. */
  spec: BackendSpec;
  /** Whether its package is installed. */
  installed: boolean;
  /** Its package's version. */
  version?: string;
  /** Makes the backend, when its package loaded: each context gets its own. */
  create?: () => TransportContext | ChannelContext;
  /** Whether it can work here. */
  viability: Viability;
  /** Transports that can work here: the domain they connect within. */
  domain?: string;
  /** Channels that can work here: the devices they serve, with their descriptors. */
  devices?: readonly DeviceDescriptor[];
  /** mpt: where its lanes run, when not on threads why. */
  lanes?: string;
  /** Channels that can work here: the connections each pipe opens for it. */
  connections?: number;
}

/**
 * What a backend says of itself, asked once of an instance that is then
 * closed, so that probing holds nothing (threads, sockets, devices).
 */
async function probe(
  spec: BackendSpec,
  instance: TransportContext | ChannelContext,
): Promise<Pick<FoundBackend, "viability" | "domain" | "devices" | "lanes" | "connections">> {
  try {
    const viability = instance.isViable();
    if (spec.kind === "transport") return { viability, ...(viability.viable ? { domain: (instance as TransportContext).domainDescriptor() } : {}) };
    const devices = (instance as ChannelContext).deviceDescriptors();
    spec.memory = devices.length > 0 && devices.every((d) => d.device.type === "cpu") ? "cpu" : "cuda";
    if (!viability.viable) return { viability };
    const threads = (instance as { threadsUnavailable?: () => string | null }).threadsUnavailable?.();
    const connections = (instance as ChannelContext).numConnectionsNeeded();
    return {
      viability,
      devices,
      connections,
      ...(threads === undefined ? {} : { lanes: threads === null ? "lanes on threads" : `lanes in the event loop: ${threads}` }),
    };
  } finally {
    await instance.close();
  }
}

function isMissing(e: unknown, packageName: string): boolean {
  const err = e as { code?: string; message?: string };
  return (err.code === "ERR_MODULE_NOT_FOUND" || err.code === "MODULE_NOT_FOUND") && (err.message ?? "").includes(`'${packageName}'`);
}

/** The directory of an installed package (where its package.json is), or undefined. */
function packageRoot(packageName: string): string | undefined {
  let entry: string;
  try {
    entry = fileURLToPath(import.meta.resolve(packageName));
  } catch {
    return undefined;
  }
  for (let dir = dirname(entry); dir !== dirname(dir); dir = dirname(dir)) {
    try {
      const json = JSON.parse(readFileSync(join(dir, "package.json"), "utf8")) as { name?: string };
      if (json.name === packageName) return dir;
    } catch {
      // not this directory
    }
  }
  return undefined;
}

function versionOf(packageName: string): string | undefined {
  const root = packageRoot(packageName);
  if (!root) return undefined;
  return (JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as { version?: string }).version;
}

/** Loads each backend package that is installed (the first-party ones, then `options.backends`) and asks it whether it can work here. */
export async function findBackends(options: BackendOptions = {}, packages: readonly string[] = allPackages(options)): Promise<FoundBackend[]> {
  const found: FoundBackend[] = [];
  for (const packageName of packages) {
    let module: { backend?: unknown };
    try {
      // A path is the user's, from where they run the command; a bare name is a package.
      const target = /^\.{0,2}\//.test(packageName) ? pathToFileURL(resolve(packageName)).href : packageName;
      module = (await import(target)) as { backend?: unknown };
    } catch (e) {
      const spec = guessedSpec(packageName);
      found.push(
        isMissing(e, packageName)
          ? { spec, installed: false, viability: notViable(`not installed (npm install ${packageName})`) }
          : { spec, installed: true, viability: notViable(`${packageName} failed to load: ${(e as Error).message}`) },
      );
      continue;
    }
    const version = versionOf(packageName);
    if (!isBackendDescriptor(module.backend)) {
      const spec = guessedSpec(packageName);
      found.push({ spec, installed: true, version, viability: notViable(`${packageName} exports no \`backend\` (kind, name, priority, create)`) });
      continue;
    }
    const backend = module.backend;
    const spec: BackendSpec = { kind: backend.kind, name: backend.name, packageName, priority: backend.priority };
    if (backend.kind === "transport" && backend.listenUrl) spec.listenUrl = (host) => backend.listenUrl!(host);
    const create = () => backend.create(options);
    try {
      found.push({ spec, installed: true, version, create, ...(await probe(spec, create())) });
    } catch (e) {
      found.push({ spec, installed: true, version, viability: notViable((e as Error).message) });
    }
  }
  return found;
}

function allPackages(options: BackendOptions): string[] {
  return [...BACKEND_PACKAGES, ...(options.backends ?? []).filter((b) => !BACKEND_PACKAGES.includes(b))];
}

export interface BackendChoice extends ContextOptions, BackendOptions {
  /** Transports to register (default: all installed); non-viable ones are skipped by negotiation. */
  transports?: readonly string[];
  /** Channels to register (default: all installed). */
  channels?: readonly string[];
}

/** Throws ERR_TP_INVALID_ARG for a name `choice` asks for that no backend of `found` has. */
export function checkNames(found: readonly FoundBackend[], choice: BackendChoice): void {
  for (const kind of ["transport", "channel"] as const) {
    const known = found.filter((b) => b.spec.kind === kind).map((b) => b.spec.name);
    const unknown = (kind === "transport" ? choice.transports : choice.channels)?.filter((name) => !known.includes(name)) ?? [];
    if (unknown.length > 0) {
      throw new TensorPipeError(
        ErrorCode.INVALID_ARG,
        `no ${kind} named ${unknown.map((n) => `"${n}"`).join(", ")}: the ${kind}s are ${known.join(", ")} (--backend MODULE adds another)`,
      );
    }
  }
}

/** The backends of `found` that `choice` asks for (all, where it names none of a kind); a name none has is ERR_TP_INVALID_ARG. */
export function chosen(found: readonly FoundBackend[], choice: BackendChoice): FoundBackend[] {
  checkNames(found, choice);
  return found.filter((b) => {
    const wanted = b.spec.kind === "transport" ? choice.transports : choice.channels;
    return !wanted || wanted.includes(b.spec.name);
  });
}

/** A context with the installed backends asked for (of `found`, where given), at their default priorities. */
export async function createContext(choice: BackendChoice = {}, found?: readonly FoundBackend[]): Promise<Context> {
  const context = new Context(choice);
  for (const b of chosen(found ?? (await findBackends(choice)), choice)) {
    if (!b.create) continue;
    if (b.spec.kind === "transport") context.registerTransport(b.spec.priority, b.spec.name, b.create() as TransportContext);
    else context.registerChannel(b.spec.priority, b.spec.name, b.create() as ChannelContext);
  }
  return context;
}

/** A URL to listen on for every viable transport found that says one, on `host` for those that take an address. */
export function listenUrls(found: readonly FoundBackend[], host = "127.0.0.1"): string[] {
  return found.flatMap((b) => (b.spec.listenUrl && b.viability.viable ? [b.spec.listenUrl(host)] : []));
}
