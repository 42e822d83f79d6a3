/**
 * The project's bench, as `pnpm bench` runs it from the repository root:
 *   node packages/bench/dist/main.js [--sizes 8,64K,1M,...] [--rounds N] [--quick] [--transports a,b]
 *     [--channels c,d] [--lanes N] [--copy-threads N] [--svg FILE] [--json FILE] [--no-zmq] [--backend MODULE ...] [--targets]
 */
import { parseArgs } from "node:util";
import { runBench } from "./bench.js";
import { parseSize } from "./sizes.js";

const list = (s: string | undefined) =>
  s
    ?.split(",")
    .map((x) => x.trim())
    .filter(Boolean);
const positive = (flag: string, value: string | undefined, max = Number.MAX_SAFE_INTEGER) => {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!(Number.isInteger(n) && n >= 1)) throw new Error(`${flag} must be a positive integer, got ${value}`);
  if (n > max) throw new Error(`${flag} must be at most ${max}, got ${value}`);
  return n;
};

// `pnpm bench -- --quick` hands the script the "--" itself.
const args = process.argv.slice(2).filter((a, i) => !(i === 0 && a === "--"));
const { values } = parseArgs({
  args,
  options: {
    sizes: { type: "string" },
    rounds: { type: "string" },
    quick: { type: "boolean" },
    transports: { type: "string" },
    channels: { type: "string" },
    lanes: { type: "string" },
    "copy-threads": { type: "string" },
    svg: { type: "string" },
    json: { type: "string" },
    "no-zmq": { type: "boolean" },
    backend: { type: "string", multiple: true },
    targets: { type: "boolean" },
  },
});
await runBench({
  sizes: list(values.sizes)?.map(parseSize),
  rounds: positive("--rounds", values.rounds),
  quick: values.quick,
  transports: list(values.transports),
  channels: list(values.channels),
  lanes: positive("--lanes", values.lanes),
  parallelism: positive("--copy-threads", values["copy-threads"], 64),
  noZmq: values["no-zmq"],
  svgPath: values.svg ?? "tensorpipe-bench.svg",
  jsonPath: values.json,
  ...(values.backend ? { backends: values.backend } : {}),
  targets: values.targets,
});
