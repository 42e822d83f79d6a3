/**
 * Every js/ts code block in the READMEs and docs compiles under `strict`
 * against the built packages, as a user would copy it; the README's first
 * example also runs and prints what it says. A block that uses names it
 * does not define says so in an HTML comment right before it,
 * `<!-- check: declare const pipe: import("@tensorpipe/core").Pipe; -->`,
 * or `<!-- check: skip (why) -->` for a sketch that is not code.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, expect, it } from "vitest";

const repo = fileURLToPath(new URL("../../../", import.meta.url));
const root = mkdtempSync(join(tmpdir(), "tp-docs-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface Block {
  file: string;
  line: number;
  preamble: string;
  code: string;
}

function blocks(): Block[] {
  const files = [
    "README.md",
    ...readdirSync(join(repo, "packages")).map((p) => `packages/${p}/README.md`),
    ...readdirSync(join(repo, "docs"))
      .filter((f) => f.endsWith(".md"))
      .map((f) => `docs/${f}`),
  ];
  const out: Block[] = [];
  for (const file of files) {
    let text: string;
    try {
      text = readFileSync(join(repo, file), "utf8");
    } catch {
      continue;
    }
    for (const m of text.matchAll(/(?:<!-- check: (.*?) -->\n)?```(?:js|ts)\n([\s\S]*?)```/g)) {
      const check = m[1] ?? "";
      if (check.startsWith("skip")) continue;
      out.push({ file, line: text.slice(0, m.index).split("\n").length, preamble: check, code: m[2]! });
    }
  }
  return out;
}

it("compile strict as written, and the README's first example runs", () => {
  const app = join(root, "app");
  mkdirSync(join(app, "node_modules/@tensorpipe"), { recursive: true });
  mkdirSync(join(app, "node_modules/@types"), { recursive: true });
  for (const p of readdirSync(join(repo, "packages"))) {
    const manifest = JSON.parse(readFileSync(join(repo, "packages", p, "package.json"), "utf8")) as { name: string };
    symlinkSync(join(repo, "packages", p), join(app, "node_modules", manifest.name));
  }
  symlinkSync(join(repo, "node_modules/@types/node"), join(app, "node_modules/@types/node"));
  // What the metrics package's README has its users install beside it.
  mkdirSync(join(app, "node_modules/@opentelemetry"), { recursive: true });
  symlinkSync(join(repo, "packages/metrics/node_modules/prom-client"), join(app, "node_modules/prom-client"));
  symlinkSync(join(repo, "packages/metrics/node_modules/@opentelemetry/api"), join(app, "node_modules/@opentelemetry/api"));
  writeFileSync(join(app, "package.json"), JSON.stringify({ type: "module" }));
  writeFileSync(
    join(app, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        noUncheckedIndexedAccess: true,
        exactOptionalPropertyTypes: true,
        noEmit: true,
        types: ["node"],
        skipLibCheck: true,
      },
      include: ["*.ts"],
    }),
  );
  const all = blocks();
  expect(all.length).toBeGreaterThan(15);
  const where = new Map<string, Block>();
  all.forEach((b, i) => {
    const name = `block${i}.ts`;
    where.set(name, b);
    writeFileSync(join(app, name), `${b.preamble}\n${b.code}\nexport {};\n`);
  });
  try {
    execFileSync(process.execPath, [join(repo, "node_modules/typescript/bin/tsc"), "-p", app], { cwd: app, encoding: "utf8" });
  } catch (e) {
    // Each error named by the document and line it came from.
    const errors = (e as { stdout: string }).stdout.replace(/block(\d+)\.ts\((\d+),\d+\)/g, (_, n: string, line: string) => {
      const b = where.get(`block${n}.ts`)!;
      return `${b.file}:${b.line + Number(line) - (b.preamble ? 1 : 0)}`;
    });
    throw new Error(`code blocks that do not compile strict:\n${errors}`);
  }
  // The first example, as a user runs it.
  const first = all.find((b) => b.file === "README.md")!;
  writeFileSync(join(app, "example.mjs"), first.code);
  expect(execFileSync(process.execPath, [join(app, "example.mjs")], { cwd: app, encoding: "utf8", timeout: 30_000 })).toBe(
    "hello Float32Array(3) [ 1, 2, 3 ]\n",
  );
  expect(relative(repo, app)).toMatch(/^\.\./);
}, 120_000);
