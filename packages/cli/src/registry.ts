/**
 * `tensorpipe registry`: a cluster's embedded registry in a process of its
 * own (@tensorpipe/cluster's serveRegistry()), for members that have no
 * etcd. It prints its addresses as one JSON line and serves until SIGINT
 * or SIGTERM.
 */
import { ErrorCode, TensorPipeError } from "@tensorpipe/core";
import { type BackendChoice, createContext } from "./backends.js";

/** What `tensorpipe registry` serves with. */
export interface RegistryCommandOptions extends BackendChoice {
  /** Where to listen. */
  listen: readonly string[];
  /** The most members it holds. */
  maxMembers?: number | undefined;
  /** How long a member that comes back waits for its first view, after the registry starts. */
  startupGrace?: number | undefined;
}

export async function runRegistry(options: RegistryCommandOptions): Promise<void> {
  let cluster: typeof import("@tensorpipe/cluster");
  try {
    cluster = await import("@tensorpipe/cluster");
  } catch {
    throw new TensorPipeError(ErrorCode.NOT_VIABLE, "tensorpipe registry needs @tensorpipe/cluster: npm install @tensorpipe/cluster beside @tensorpipe/cli");
  }
  // Its requests are small JSON: a peer's control frames and messages are bounded to match.
  const context = await createContext({ maxControlFrameLength: 1 << 20, maxMessageBytes: 1 << 20, ...options, name: "registry" });
  const registry = await cluster.serveRegistry(context, { listen: options.listen, maxMembers: options.maxMembers, startupGrace: options.startupGrace });
  process.stdout.write(`${JSON.stringify({ registry: registry.url, addresses: registry.addresses() })}\n`);
  await new Promise<void>((resolve) => {
    process.once("SIGINT", resolve);
    process.once("SIGTERM", resolve);
  });
  registry.close();
  await context.close();
}
