import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type ChannelContext, Context, type ContextOptions, type TransportContext, type Viability, notViable } from "@tensorpipe/core/backend";

/** Options the CLI passes on to the backends that take them. */
export interface BackendOptions {
  /** mpt lanes (default: its own). */
  lanes?: number;
  /** uv: the network interface to listen and connect on. */
  interface?: string;
  /** uv: how long a silent peer may go unnoticed, in ms (see UvTransportOptions.peerTimeout). */
  peerTimeout?: number;
}

/** A first-party backend package: where it lives and how to make one. */
export interface BackendSpec {
  /** Transport or channel. */
  kind: "transport" | "channel";
  /** The name it registers under. */
  name: string;
  /** Its npm package. */
  packageName: string;
  /** Upstream's ordering: higher wins negotiation. */
  priority: number;
  /** The memory its tensors live in (channels; default cpu): the CPU bench leaves GPU channels out. */
  memory?: "cpu" | "cuda";
  /** Makes the backend from its loaded package. */
  create(module: any, options: BackendOptions): TransportContext | ChannelContext;
}

/** Every first-party backend, at upstream's priorities. */
export const BACKENDS: readonly BackendSpec[] = [
  { kind: "transport", name: "shm", packageName: "@tensorpipe/transport-shm", priority: 10, create: (m) => new m.ShmTransport() },
  {
    kind: "transport",
    name: "uv",
    packageName: "@tensorpipe/transport-uv",
    priority: 1,
    create: (m, o) => new m.UvTransport({ interface: o.interface, peerTimeout: o.peerTimeout }),
  },
  {
    kind: "channel",
    name: "cuda-ipc",
    packageName: "@tensorpipe/channel-cuda-ipc",
    priority: 200,
    memory: "cuda",
    create: (m) => new m.CudaIpcChannelContext(),
  },
  {
    kind: "channel",
    name: "cuda-gdr",
    packageName: "@tensorpipe/channel-cuda-gdr",
    priority: 150,
    memory: "cuda",
    create: (m) => new m.CudaGdrChannelContext(),
  },
  {
    kind: "channel",
    name: "cuda-basic",
    packageName: "@tensorpipe/channel-cuda-basic",
    priority: 100,
    memory: "cuda",
    create: (m) => new m.CudaBasicChannelContext(),
  },
  { kind: "channel", name: "cma", packageName: "@tensorpipe/channel-cma", priority: 20, create: (m) => new m.CmaChannelContext() },
  {
    kind: "channel",
    name: "mpt",
    packageName: "@tensorpipe/channel-mpt",
    priority: 10,
    create: (m, o) => new m.MptChannelContext({ lanes: o.lanes }),
  },
  { kind: "channel", name: "basic", packageName: "@tensorpipe/channel-basic", priority: 0, create: (m) => new m.BasicChannelContext() },
];

/** The first-party transports' names. */
export const ALL_TRANSPORTS = BACKENDS.filter((b) => b.kind === "transport").map((b) => b.name);
/** The first-party channels' names. */
export const ALL_CHANNELS = BACKENDS.filter((b) => b.kind === "channel").map((b) => b.name);

/** A backend as found on this machine. */
export interface FoundBackend {
  /** What it is. */
  spec: BackendSpec;
  /** Whether its package is installed. */
  installed: boolean;
  /** Its package's version. */
  version?: string;
  /** The backend, when its package loaded. */
  instance?: TransportContext | ChannelContext;
  /** Whether it can work here. */
  viability: Viability;
}

function isMissing(e: unknown, packageName: string): boolean {
  const err = e as { code?: string; message?: string };
  return (
    (err.code === "ERR_MODULE_NOT_FOUND" || err.code === "MODULE_NOT_FOUND") &&
    (err.message ?? "").includes(`'${packageName}'`)
  );
}

/** The directory of an installed package (where its package.json is), or undefined. */
export function packageRoot(packageName: string): string | undefined {
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

/** Loads each backend package that is installed and asks it whether it can work here. */
export async function findBackends(options: BackendOptions = {}, specs: readonly BackendSpec[] = BACKENDS): Promise<FoundBackend[]> {
  const found: FoundBackend[] = [];
  for (const spec of specs) {
    let module: unknown;
    try {
      module = await import(spec.packageName);
    } catch (e) {
      found.push(
        isMissing(e, spec.packageName)
          ? { spec, installed: false, viability: notViable(`not installed (npm install ${spec.packageName})`) }
          : { spec, installed: true, viability: notViable(`${spec.packageName} failed to load: ${(e as Error).message}`) },
      );
      continue;
    }
    const version = versionOf(spec.packageName);
    try {
      const instance = spec.create(module, options);
      found.push({ spec, installed: true, version, instance, viability: instance.isViable() });
    } catch (e) {
      found.push({ spec, installed: true, version, viability: notViable((e as Error).message) });
    }
  }
  return found;
}

export interface BackendChoice extends ContextOptions, BackendOptions {
  /** Transports to register (default: all installed); non-viable ones are skipped by negotiation. */
  transports?: readonly string[];
  /** Channels to register (default: all installed). */
  channels?: readonly string[];
}

/** A context with the installed backends asked for, at upstream's priorities. */
export async function createContext(choice: BackendChoice = {}): Promise<Context> {
  const context = new Context(choice);
  // Only the backends asked for are loaded and probed.
  const specs = BACKENDS.filter((spec) => {
    const wanted = spec.kind === "transport" ? choice.transports : choice.channels;
    return !wanted || wanted.includes(spec.name);
  });
  for (const b of await findBackends(choice, specs)) {
    if (!b.instance) continue;
    if (b.spec.kind === "transport") context.registerTransport(b.spec.priority, b.spec.name, b.instance as TransportContext);
    else context.registerChannel(b.spec.priority, b.spec.name, b.instance as ChannelContext);
  }
  return context;
}

/** Listen URLs for every viable transport of `context`, on `host` for TCP. */
export function listenUrls(context: Context, host = "127.0.0.1"): string[] {
  const urls: string[] = [];
  for (const b of context.backends()) {
    if (b.kind !== "transport" || !b.viability.viable) continue;
    if (b.name === "uv") urls.push(`uv://${host.includes(":") ? `[${host}]` : host}:0`);
    if (b.name === "shm") urls.push("shm://*");
  }
  return urls;
}

/** "--transports uv,shm --channels basic --lanes 4" from argv. */
export function backendsFromArgs(argv: readonly string[]): BackendChoice {
  const value = (flag: string) => {
    const i = argv.indexOf(flag);
    return i >= 0 ? argv[i + 1] : undefined;
  };
  const list = (flag: string) => value(flag)?.split(",").filter(Boolean);
  const lanes = value("--lanes");
  const peerTimeout = value("--peer-timeout");
  return {
    peerTimeout: peerTimeout === undefined ? undefined : Number(peerTimeout),
    transports: list("--transports"),
    channels: list("--channels"),
    lanes: lanes === undefined ? undefined : Number(lanes),
    interface: value("--interface"),
  };
}
