import { BasicChannelContext } from "@tensorpipe/channel-basic";
import { CmaChannelContext } from "@tensorpipe/channel-cma";
import { MptChannelContext } from "@tensorpipe/channel-mpt";
import { Context, type ContextOptions } from "@tensorpipe/core";
import { ShmTransport } from "@tensorpipe/transport-shm";
import { UvTransport } from "@tensorpipe/transport-uv";

export const ALL_TRANSPORTS = ["uv", "shm"] as const;
export const ALL_CHANNELS = ["basic", "mpt", "cma"] as const;

export interface BackendChoice extends ContextOptions {
  /** Transports to register (default: all); non-viable ones are skipped by negotiation. */
  transports?: readonly string[];
  channels?: readonly string[];
  /** mpt lanes (default: its own). */
  lanes?: number;
}

/** A context with the backends asked for, at upstream's priorities. */
export function createContext(choice: BackendChoice = {}): Context {
  const context = new Context(choice);
  const transports = choice.transports ?? ALL_TRANSPORTS;
  const channels = choice.channels ?? ALL_CHANNELS;
  if (transports.includes("uv")) context.registerTransport(1, "uv", new UvTransport());
  if (transports.includes("shm")) context.registerTransport(10, "shm", new ShmTransport());
  if (channels.includes("basic")) context.registerChannel(0, "basic", new BasicChannelContext());
  if (channels.includes("mpt")) context.registerChannel(10, "mpt", new MptChannelContext({ lanes: choice.lanes }));
  if (channels.includes("cma")) context.registerChannel(20, "cma", new CmaChannelContext());
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

/** "--transports uv,shm --channels basic" from argv. */
export function backendsFromArgs(argv: readonly string[]): BackendChoice {
  const list = (flag: string) => {
    const i = argv.indexOf(flag);
    return i >= 0 ? argv[i + 1]!.split(",").filter(Boolean) : undefined;
  };
  const lanes = argv.includes("--lanes") ? Number(argv[argv.indexOf("--lanes") + 1]) : undefined;
  return { transports: list("--transports"), channels: list("--channels"), lanes };
}
