#!/usr/bin/env node
/**
 * The `tensorpipe` command.
 *   tensorpipe doctor [--json] [--interface NAME] [--backend MODULE ...]
 *   tensorpipe bench [--sizes 8,64K,1M,...] [--rounds N] [--quick] [--transports a,b] [--channels c,d]
 *                    [--lanes N] [--svg FILE] [--json FILE] [--no-zmq] [--backend MODULE ...] [--targets]
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { DEFAULT_SIZES, parseSize, runBench, sizeLabel } from "./bench.js";
import { formatDoctor, runDoctor } from "./doctor.js";

const USAGE = `usage: tensorpipe <command> [options]

commands:
  doctor   list the installed backends, whether each can work here and why not,
           and the network interfaces and addresses
             --json               the report as JSON
             --interface NAME     ask uv about this interface
             --backend MODULE     a third-party backend package too (it exports
                                  \`backend\`); may be given again
  bench    spawn a peer process and measure every viable transport x channel
           pair over a matrix of sizes, against memcpy, node:net and zeromq.js
             --sizes LIST         default ${DEFAULT_SIZES.map(sizeLabel).join(",").replaceAll(" ", "")}
             --rounds N           rounds per cell, medians reported (default 3)
             --quick              fewer iterations
             --transports LIST    only these transports (e.g. uv,shm)
             --channels LIST      only these channels (e.g. basic,cma)
             --lanes N            mpt lanes
             --svg FILE           plot of GB/s against size (default tensorpipe-bench.svg)
             --json FILE          every figure as JSON
             --no-zmq             leave zeromq.js out
             --backend MODULE     a third-party backend package too; may be given again
             --targets            also the project's own targets, each met or not
  help     this text
  version  the CLI's version`;

function fail(message: string): never {
  process.stderr.write(`tensorpipe: ${message}\n\n${USAGE}\n`);
  process.exit(2);
}

const list = (s: string | undefined) => s?.split(",").map((x) => x.trim()).filter(Boolean);

async function main(argv: string[]): Promise<number> {
  const [command, ...given] = argv;
  // `pnpm bench -- --quick` hands the script the "--" itself.
  const rest = given[0] === "--" ? given.slice(1) : given;
  if (command === undefined || command === "help" || command === "--help" || command === "-h") {
    process.stdout.write(`${USAGE}\n`);
    return 0;
  }
  if (command === "version" || command === "--version") {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
    process.stdout.write(`${pkg.version}\n`);
    return 0;
  }
  if (command === "doctor") {
    let values;
    try {
      ({ values } = parseArgs({
        args: rest,
        options: { json: { type: "boolean" }, interface: { type: "string" }, backend: { type: "string", multiple: true } },
      }));
    } catch (e) {
      fail((e as Error).message);
    }
    const report = await runDoctor({ interface: values.interface, backends: values.backend });
    process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatDoctor(report).join("\n")}\n`);
    return report.usable ? 0 : 1;
  }
  if (command === "bench") {
    let values;
    try {
      ({ values } = parseArgs({
        args: rest,
        options: {
          sizes: { type: "string" },
          rounds: { type: "string" },
          quick: { type: "boolean" },
          transports: { type: "string" },
          channels: { type: "string" },
          lanes: { type: "string" },
          svg: { type: "string" },
          json: { type: "string" },
          "no-zmq": { type: "boolean" },
          backend: { type: "string", multiple: true },
          targets: { type: "boolean" },
        },
      }));
    } catch (e) {
      fail((e as Error).message);
    }
    let sizes: number[] | undefined;
    try {
      sizes = list(values.sizes)?.map(parseSize);
    } catch (e) {
      fail((e as Error).message);
    }
    const rounds = values.rounds === undefined ? undefined : Number(values.rounds);
    if (rounds !== undefined && !(Number.isInteger(rounds) && rounds >= 1)) fail(`--rounds must be a positive integer, got ${values.rounds}`);
    const lanes = values.lanes === undefined ? undefined : Number(values.lanes);
    if (lanes !== undefined && !(Number.isInteger(lanes) && lanes >= 1)) fail(`--lanes must be a positive integer, got ${values.lanes}`);
    await runBench({
      sizes,
      rounds,
      quick: values.quick,
      transports: list(values.transports),
      channels: list(values.channels),
      lanes,
      noZmq: values["no-zmq"],
      svgPath: values.svg ?? "tensorpipe-bench.svg",
      jsonPath: values.json,
      backends: values.backend,
      targets: values.targets,
    });
    return 0;
  }
  fail(`unknown command "${command}"`);
}

main(process.argv.slice(2)).then(
  (code) => process.exit(code),
  (e: unknown) => {
    const err = e as { code?: string; message?: string };
    process.stderr.write(`tensorpipe: ${err.code ? `${err.code}: ` : ""}${err.message ?? String(e)}\n`);
    process.exit(1);
  },
);
