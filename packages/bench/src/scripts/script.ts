/**
 * What this package's measuring scripts share when run as
 * `node packages/bench/dist/scripts/<script>.js`: their command line, and their
 * results printed as JSON (`--json`) or as a table under a title.
 */
import { fileURLToPath } from "node:url";
import { type BackendChoice, type PeerProcess, createContext, spawnPeer } from "../index.js";
import type { Pipe } from "@tensorpipe/core";

/** A script's command line: `--name value` options and `--flag`s. */
export class ScriptArgs {
  constructor(private readonly args: readonly string[]) {}

  /** The word after `name`, or `fallback` when `name` is not given. */
  value(name: string, fallback: string): string {
    const at = this.args.indexOf(name);
    return at >= 0 && at + 1 < this.args.length ? this.args[at + 1]! : fallback;
  }

  /** Whether `flag` is given. */
  has(flag: string): boolean {
    return this.args.includes(flag);
  }
}

/** The command line when the module at `moduleUrl` is the script node runs; undefined when it is imported. */
export function scriptArgs(moduleUrl: string): ScriptArgs | undefined {
  return process.argv[1] === fileURLToPath(moduleUrl) ? new ScriptArgs(process.argv.slice(2)) : undefined;
}

/** One column of a printed table. */
export interface Column<T> {
  /** Its heading. */
  header: string;
  /** Characters it takes; cells are padded to it. */
  width: number;
  /** A row's cell (the index is the row's). */
  cell: (row: T, index: number) => string;
  /** Padded on the right (a name, a last remark) instead of the left. */
  left?: boolean;
}

/** `rows` as one line of JSON with `--json`, else `title` and a table. */
export function printResults<T>(args: ScriptArgs, title: string, rows: readonly T[], columns: readonly Column<T>[]): void {
  if (args.has("--json")) {
    console.log(JSON.stringify(rows));
    return;
  }
  const line = (text: (c: Column<T>) => string) =>
    columns
      .map((c) => (c.left ? text(c).padEnd(c.width) : text(c).padStart(c.width)))
      .join("")
      .trimEnd();
  console.log(title);
  console.log(line((c) => c.header));
  rows.forEach((row, i) => console.log(line((c) => c.cell(row, i))));
}

/**
 * Runs `use` with a pipe over shm to the bench's peer process (listening on
 * shm alone, with `peerArgs` besides), negotiated from `choice`; the
 * context and the peer are closed after, however `use` ends.
 */
export async function withShmPeer<T>(choice: BackendChoice, use: (pipe: Pipe, peer: PeerProcess) => Promise<T>, peerArgs: readonly string[] = []): Promise<T> {
  const peer = await spawnPeer("127.0.0.1", ["--transports", "shm", ...peerArgs]);
  try {
    const context = await createContext({ ...choice, transports: ["shm"] });
    try {
      return await use(await context.connect(peer.urls.find((u) => u.startsWith("shm://"))!), peer);
    } finally {
      await context.close();
    }
  } finally {
    await peer.stop();
  }
}
