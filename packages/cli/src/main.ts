#!/usr/bin/env node
/**
 * The `tensorpipe` command.
 *   tensorpipe doctor [--json] [--interface NAME] [--peer URL [--secret-file FILE]] [--backend MODULE ...]
 *   tensorpipe bench [--sizes 8,64K,1M,...] [--quick] [--transports a,b] [--channels c,d] [--lanes N] [--copy-threads N]
 *                    [--json FILE] [--backend MODULE ...]
 *   tensorpipe peer [--host ADDR] [--transports a,b] [--channels c,d] [--lanes N] [--copy-threads N] [--interface NAME]
 *                   [--peer-timeout MS] [--timeout MS] [--warm-up N] [--secret-file FILE] [--backend MODULE ...]
 *   tensorpipe registry --listen URL [--listen URL ...] [--secret-file FILE] [--max-members N] [--startup-grace MS] [--backend MODULE ...]
 */
import { readFileSync } from "node:fs";
import { type ParseArgsConfig, parseArgs } from "node:util";
import { DEFAULT_SIZES, runBench } from "./bench.js";
import { formatDoctor, runDoctor, tryPeer } from "./doctor.js";
import { parseSize, sizeLabel } from "./figures.js";
import { runPeer } from "./peer.js";
import { runRegistry } from "./registry.js";

const USAGE = `usage: tensorpipe <command> [options]

commands:
  doctor   list the installed backends, whether each can work here and why not,
           and the network interfaces and addresses
             --json               the report as JSON
             --interface NAME     ask uv about this interface
             --peer URL           open a pipe to a listener (another container,
                                  \`tensorpipe peer\` there) and tell its path: what
                                  each side offered, what was chosen, why not the rest
             --secret-file FILE   with --peer: the listener's shared secret (auth)
             --backend MODULE     a third-party backend package too (it exports
                                  \`backend\`); may be given again
  bench    spawn \`tensorpipe peer\` and time round trips and one-way streams
           over every viable transport x channel pair, over the pair
           negotiation picks, and over node:net, at a range of sizes
             --sizes LIST         default ${DEFAULT_SIZES.map(sizeLabel).join(",").replaceAll(" ", "")}
             --quick              fewer messages: seconds
             --transports LIST    only these transports (e.g. uv,shm)
             --channels LIST      only these channels (e.g. basic,cma)
             --lanes N            mpt lanes
             --copy-threads N     cma: copier threads for large tensors
             --json FILE          every figure as JSON
             --backend MODULE     a third-party backend package too; may be given again
  peer     listen on every viable transport (and node:net on 127.0.0.1), print
           the addresses as one JSON line, echo messages until stdin closes
             --host ADDR          the address to listen on for TCP (default 127.0.0.1);
                                  anyone who reaches it may send: see --secret-file
             --secret-file FILE   pipes only for peers with this shared secret (at
                                  least 16 bytes; TENSORPIPE_SECRET in the environment
                                  does the same)
             --transports LIST    only these transports
             --channels LIST      only these channels
             --lanes N            mpt lanes
             --copy-threads N     cma: copier threads for large tensors
             --interface NAME     uv: the network interface
             --peer-timeout MS    uv: how long a silent peer may go unnoticed
             --timeout MS         a deadline for each read and write
             --warm-up N          before it listens, run the hot path N times over
                                  pipes to itself (Context.warmUp())
             --backend MODULE     a third-party backend package too; may be given again
  registry serve a cluster's embedded registry (@tensorpipe/cluster, installed
           beside the CLI) for members without etcd; print its addresses as one
           JSON line, serve until SIGINT or SIGTERM
             --listen URL         where to listen (uv://0.0.0.0:7000, shm://...);
                                  may be given again, one per transport
             --secret-file FILE   only members with this shared secret may join
                                  (TENSORPIPE_SECRET does the same)
             --max-members N      the most members it holds (default 1024)
             --startup-grace MS   after it starts, how long a member that comes back
                                  waits for its first view (default 2500; 0: none)
             --backend MODULE     a third-party backend package too; may be given again
  help     this text
  version  the CLI's version`;

function fail(message: string): never {
  process.stderr.write(`tensorpipe: ${message}\n\n${USAGE}\n`);
  process.exit(2);
}

const list = (s: string | undefined) =>
  s
    ?.split(",")
    .map((x) => x.trim())
    .filter(Boolean);

/** ContextOptions.auth from --secret-file (its bytes, a final newline left out) or TENSORPIPE_SECRET; none without either. */
function auth(file: string | undefined): { auth?: { secret: Uint8Array | string } } {
  if (file !== undefined) {
    let secret: Buffer;
    try {
      secret = readFileSync(file);
    } catch (e) {
      fail(`--secret-file ${file}: ${(e as Error).message}`);
    }
    if (secret.at(-1) === 0x0a) secret = secret.subarray(0, -1);
    if (secret.length < 16) fail(`--secret-file ${file}: a secret needs at least 16 bytes, the file has ${secret.length}`);
    return { auth: { secret } };
  }
  const fromEnv = process.env.TENSORPIPE_SECRET;
  return fromEnv ? { auth: { secret: fromEnv } } : {};
}

function parse<T extends ParseArgsConfig["options"]>(args: string[], options: T) {
  try {
    return parseArgs({ args, options, strict: true }).values;
  } catch (e) {
    fail((e as Error).message);
  }
}

/** A flag's value as a positive integer up to `max`, or undefined when not given. */
function positive(flag: string, value: string | undefined, max = Number.MAX_SAFE_INTEGER): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!(Number.isInteger(n) && n >= 1)) fail(`${flag} must be a positive integer, got ${value}`);
  if (n > max) fail(`${flag} must be at most ${max}, got ${value}`);
  return n;
}

/** cma's bound on copier threads (CmaChannelOptions.parallelism): past it cma would not start, and the run would go on without it. */
const MAX_COPY_THREADS = 64;

async function main(argv: string[]): Promise<number> {
  const [command, ...given] = argv;
  // `pnpm bench -- --quick` hands the script the "--" itself.
  const rest = given[0] === "--" ? given.slice(1) : given;
  const wantsHelp = rest.includes("--help") || rest.includes("-h");
  if (command === undefined || command === "help" || command === "--help" || command === "-h" || wantsHelp) {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (command === "version" || command === "--version") {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
    process.stdout.write(`${pkg.version}\n`);
    return 0;
  }
  if (command === "doctor") {
    const values = parse(rest, {
      json: { type: "boolean" },
      interface: { type: "string" },
      peer: { type: "string" },
      "secret-file": { type: "string" },
      backend: { type: "string", multiple: true },
    });
    const report = await runDoctor({ interface: values.interface, backends: values.backend });
    if (values.peer !== undefined)
      report.peer = await tryPeer(values.peer, { interface: values.interface, backends: values.backend, ...auth(values["secret-file"]) });
    process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatDoctor(report).join("\n")}\n`);
    return report.usable && report.peer?.error === undefined && !report.unusableModules ? 0 : 1;
  }
  if (command === "bench") {
    const values = parse(rest, {
      sizes: { type: "string" },
      quick: { type: "boolean" },
      transports: { type: "string" },
      channels: { type: "string" },
      lanes: { type: "string" },
      "copy-threads": { type: "string" },
      json: { type: "string" },
      backend: { type: "string", multiple: true },
    });
    let sizes: number[] | undefined;
    try {
      sizes = list(values.sizes)?.map(parseSize);
    } catch (e) {
      fail((e as Error).message);
    }
    await runBench({
      sizes,
      quick: values.quick,
      transports: list(values.transports),
      channels: list(values.channels),
      lanes: positive("--lanes", values.lanes),
      parallelism: positive("--copy-threads", values["copy-threads"], MAX_COPY_THREADS),
      jsonPath: values.json,
      backends: values.backend,
    });
    return 0;
  }
  if (command === "peer") {
    const values = parse(rest, {
      host: { type: "string" },
      transports: { type: "string" },
      channels: { type: "string" },
      lanes: { type: "string" },
      "copy-threads": { type: "string" },
      interface: { type: "string" },
      "peer-timeout": { type: "string" },
      timeout: { type: "string" },
      "warm-up": { type: "string" },
      "secret-file": { type: "string" },
      backend: { type: "string", multiple: true },
    });
    await runPeer({
      ...auth(values["secret-file"]),
      host: values.host,
      transports: list(values.transports),
      channels: list(values.channels),
      lanes: positive("--lanes", values.lanes),
      parallelism: positive("--copy-threads", values["copy-threads"], MAX_COPY_THREADS),
      interface: values.interface,
      peerTimeout: positive("--peer-timeout", values["peer-timeout"]),
      timeout: positive("--timeout", values.timeout),
      warmUp: positive("--warm-up", values["warm-up"]),
      ...(values.backend ? { backends: values.backend } : {}),
    });
    return 0;
  }
  if (command === "registry") {
    const values = parse(rest, {
      listen: { type: "string", multiple: true },
      "secret-file": { type: "string" },
      "max-members": { type: "string" },
      "startup-grace": { type: "string" },
      backend: { type: "string", multiple: true },
    });
    if (!values.listen?.length) fail("registry: give --listen URL, like --listen uv://0.0.0.0:7000");
    await runRegistry({
      ...auth(values["secret-file"]),
      listen: values.listen,
      maxMembers: positive("--max-members", values["max-members"]),
      startupGrace: values["startup-grace"] === "0" ? 0 : positive("--startup-grace", values["startup-grace"]),
      ...(values.backend ? { backends: values.backend } : {}),
    });
    return 0;
  }
  fail(`unknown command "${command}"`);
}

/** Exits once what was written to stdout has gone: exiting at once cut a piped report at 64 KiB. */
function exit(code: number): void {
  process.stdout.write("", () => process.exit(code));
}

main(process.argv.slice(2)).then(
  (code) => exit(code),
  (e: unknown) => {
    const err = e as { code?: string; message?: string };
    // A mistake in the command line, found once the backends were looked at.
    if (err.code === "ERR_TP_INVALID_ARG") fail(err.message ?? String(e));
    process.stderr.write(`tensorpipe: ${err.code ? `${err.code}: ` : ""}${err.message ?? String(e)}\n`);
    process.exit(1);
  },
);
