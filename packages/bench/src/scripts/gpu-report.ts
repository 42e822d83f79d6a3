/**
 * The page docs/benchmarks/<date>-<gpu>.md, made from what
 * scripts/device-gpu-checks.sh left in its output folder, on the machine it
 * ran on: the machine, the CUDA packages' tests, the C exchange of CUDA IPC
 * handles, bench-cuda with its ratios and the issue's targets, and
 * `tensorpipe bench` on that machine's cores (shm+cma against memcpy, and
 * cma's C program, the kernel's share), and cma by copier threads. Steps
 * that did not run are said to be missing, not left out.
 *
 *   node packages/bench/dist/scripts/gpu-report.js OUT_DIR [--into docs/benchmarks] [--date YYYY-MM-DD]
 */
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { cpus, release, totalmem } from "node:os";
import { join } from "node:path";
import type { BenchResult } from "../result.js";
import { fmt, median } from "../index.js";
import type { CmaThreadsResult } from "./cma-threads.js";
import { ScriptArgs } from "./script.js";

/** What bench-cuda --json prints: the part read here. */
interface BenchCuda {
  gpu: string;
  driverVersion: number;
  rounds: number;
  rows: { size: string; us: Record<string, number>; gbps: Record<string, number>; ratios: Record<string, number> }[];
  targets: { what: string; value: number; target: string; met: boolean }[];
}

const dir = process.argv[2];
if (!dir || dir.startsWith("--")) {
  console.error("usage: gpu-report.js OUT_DIR [--into docs/benchmarks] [--date YYYY-MM-DD]");
  process.exit(2);
}
const args = new ScriptArgs(process.argv.slice(3));
const date = args.value("--date", new Date().toISOString().slice(0, 10));
const into = args.value("--into", "");

const read = (name: string): string | undefined => (existsSync(join(dir, name)) ? readFileSync(join(dir, name), "utf8") : undefined);
// Tools' colours, where they printed any.
// eslint-disable-next-line no-control-regex
const plain = (text: string) => text.replace(/\u001b\[[0-9;]*m/g, "");
const missing = (step: string) => [`(missing: the ${step} step left no output in ${dir})`, ""];

/** The last line of a step's output that is JSON, parsed. */
function lastJson<T>(name: string): T | undefined {
  const line = read(name)
    ?.trim()
    .split("\n")
    .reverse()
    .find((l) => l.startsWith("{"));
  return line ? (JSON.parse(line) as T) : undefined;
}

function table(header: string[], rows: string[][]): string[] {
  return [`| ${header.join(" | ")} |`, `| ${header.map(() => "---").join(" | ")} |`, ...rows.map((r) => `| ${r.join(" | ")} |`), ""];
}

const cuda = lastJson<BenchCuda & { skipped?: string }>("bench-cuda.txt");
const gpu = cuda && !cuda.skipped ? cuda.gpu : "no GPU";
const lines: string[] = [`# GPU and ${cpus().length}-core figures, ${date}`, ""];
lines.push(
  "Made by `bash scripts/device-gpu-checks.sh` (each step's output in its output folder) and",
  "`node packages/bench/dist/scripts/gpu-report.js`, on the machine below, in one run.",
  "",
  "## Machine",
  "",
  ...table(
    ["", ""],
    [
      ["GPU", !cuda ? "unknown (bench-cuda left no output)" : cuda.skipped ? `none (${cuda.skipped})` : `${gpu}, driver API ${cuda.driverVersion}`],
      ["CPU, memory", `${cpus().length} cores (${cpus()[0]?.model ?? "?"}), ${Math.round(totalmem() / 2 ** 30)} GiB; Linux ${release()}`],
      ["Node", process.version],
    ],
  ),
);

lines.push("## Steps", "");
const steps = read("steps.txt");
if (steps === undefined) lines.push(...missing("steps"));
else {
  // device-gpu-checks.sh's lines: name, state, exit status, seconds taken, seconds allowed.
  const rows = steps
    .trim()
    .split("\n")
    .map((l) => l.split(" "));
  lines.push(
    `Within the run's deadline (\`TP_DEVICE_SECONDS\`); a step skipped or timed out left its figures missing or partial.`,
    "",
    ...table(["step", "state", "exit", "seconds", "allowed"], rows),
  );
}

lines.push("## The CUDA packages' tests against the real driver", "");
const tests = read("tests.txt");
if (tests === undefined) lines.push(...missing("tests"));
else
  lines.push(
    "```",
    ...plain(tests)
      .split("\n")
      .filter((l) => /^\s*(Test Files|Tests|Errors)\s/.test(l))
      .map((l) => l.trim()),
    "```",
    "",
  );

lines.push("## The C exchange of CUDA IPC handles (`cuda_ipc_baseline SIZE 100 MODE`, median us)", "");
const baseline = read("ipc-baseline.txt");
if (baseline === undefined) lines.push(...missing("ipc-baseline"));
else {
  const cells = new Map<string, Map<string, string>>();
  for (const l of baseline.split("\n")) {
    const m = /^(\S+) (\d+) (\{.*\})$/.exec(l.trim());
    if (!m) continue;
    const us = (JSON.parse(m[3]!) as { us: number[] }).us;
    if (!cells.has(m[2]!)) cells.set(m[2]!, new Map());
    cells.get(m[2]!)!.set(m[1]!, fmt(median(us), 1));
  }
  const modes = ["event", "sender-sync", "local"];
  lines.push(
    ...table(
      ["bytes", ...modes],
      [...cells].map(([size, byMode]) => [size, ...modes.map((m) => byMode.get(m) ?? "")]),
    ),
  );
}

lines.push(`## bench-cuda (\`bench-cuda.js --json\`${cuda?.rounds ? `, medians of ${cuda.rounds} rounds` : ""})`, "");
if (!cuda) lines.push(...missing("bench-cuda"));
else if (cuda.skipped) lines.push(`Skipped: ${cuda.skipped}`, "");
else {
  const names = Object.keys(cuda.rows[0]?.us ?? {});
  lines.push(
    "GB/s (us per transfer):",
    "",
    ...table(
      ["size", ...names],
      cuda.rows.map((r) => [r.size, ...names.map((n) => `${fmt(r.gbps[n]!, 2)} (${fmt(r.us[n]!, 1)})`)]),
    ),
  );
  const ratios = Object.keys(cuda.rows[0]?.ratios ?? {});
  lines.push(
    "Ratios of speed (higher is better):",
    "",
    ...table(
      ["size", ...ratios],
      cuda.rows.map((r) => [r.size, ...ratios.map((k) => `${fmt(r.ratios[k]!, 2)}x`)]),
    ),
  );
  lines.push(
    "Targets:",
    "",
    ...table(
      ["what", "this run", "target", ""],
      cuda.targets.map((t) => [t.what, `${fmt(t.value, 2)}x`, t.target, t.met ? "met" : "NOT MET"]),
    ),
  );
}

lines.push(`## tensorpipe bench on ${cpus().length} cores (\`main.js --rounds 3 --json\`)`, "");
const bench = read("bench.json");
if (bench === undefined) lines.push(...missing("bench"));
else {
  const result = JSON.parse(bench) as BenchResult;
  const big = result.sizes.at(-1)!;
  const label = `${big / 2 ** 20} MiB`;
  const wanted = [`shm+cma ${label} GB/s / memcpy`, `cma (C) ${label} GB/s / memcpy`];
  const shown = wanted.filter((k) => result.ratios[k] !== undefined);
  lines.push(
    ...table(
      ["ratio", "this run"],
      shown.map((k) => [k, `${fmt(result.ratios[k]!, 2)}x`]),
    ),
  );
  const own = result.ratios[wanted[0]!];
  if (own !== undefined)
    lines.push(`Target: shm+cma >= 0.8x memcpy at 64 MiB: ${own >= 0.8 ? "met" : "NOT MET"}. The C program's ratio is the kernel's part of the gap.`, "");
  lines.push(
    "<details><summary>every ratio of the run</summary>",
    "",
    ...table(
      ["ratio", "this run"],
      Object.entries(result.ratios).map(([k, v]) => [k, `${fmt(v, 2)}x`]),
    ),
    "</details>",
    "",
  );
}

lines.push("## cma by copier threads (`cma-threads.js --rounds 3 --json`, GB/s)", "");
const threads = lastJson<CmaThreadsResult>("cma-threads.txt");
if (!threads) lines.push(...missing("cma-threads"));
else {
  const cell = (v: number | undefined) => (v === undefined ? "" : fmt(v, 2));
  lines.push(
    `At ${threads.size / 2 ** 20} MiB, medians of ${threads.rounds} rounds. memcpy is the bench's, between JS buffers; memcpy (C) copies between huge pages, as cma's reader buffers are; "memcpy best" is the best of either. The default row is shm+cma to a peer at cma's default number of copiers.`,
    "",
    ...table(
      ["threads", "copiers", "memcpy", "memcpy (C)", "cma (C)", "shm+cma"],
      threads.rows.map((r) => [
        r.threads === undefined ? "default" : String(r.threads),
        String(r.copiers),
        cell(r.memcpy),
        cell(r.memcpyC),
        cell(r.cmaC),
        cell(r.shmCma),
      ]),
    ),
    ...table(
      ["ratio", "this run"],
      Object.entries(threads.ratios).map(([k, v]) => [k, `${fmt(v, 2)}x`]),
    ),
    `The kernel's copy ${threads.ratios["cma (C) best / memcpy best"] < 0.8 ? "is" : "is not"} the limit: cma (C) at its best is ${fmt(threads.ratios["cma (C) best / memcpy best"], 2)}x memcpy at its best (0.8x wanted).`,
    "",
  );
}

const slug =
  gpu === "no GPU"
    ? "no-gpu"
    : (
        gpu
          .toLowerCase()
          .replace(/^nvidia\s+/, "")
          .split(/\s+/)[0] ?? "gpu"
      ).replace(/[^a-z0-9-]/g, "");
const name = `${date}-${slug}.md`;
const text = `${lines.join("\n").trimEnd()}\n`;
for (const to of into ? [dir, into] : [dir]) {
  mkdirSync(to, { recursive: true });
  writeFileSync(join(to, name), text);
}
console.log(join(into || dir, name));
