/**
 * docs/security.md names, after each claim, the tests that hold it:
 * `file.test.ts` "the start of a test's name". Each file named exists in
 * the repository, and each name quoted is in it: a claim whose test was
 * renamed or removed fails here, not silently.
 */
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const repo = fileURLToPath(new URL("../../../", import.meta.url));

/** Every test file under packages/, by its base name (several packages may have one of a name). */
function testFiles(): Map<string, string[]> {
  const out = new Map<string, string[]>();
  const walk = (dir: string) => {
    for (const e of readdirSync(dir, { withFileTypes: true })) {
      if (e.name === "node_modules" || e.name === "dist") continue;
      const path = join(dir, e.name);
      if (e.isDirectory()) walk(path);
      else if (e.name.endsWith(".test.ts")) out.set(e.name, [...(out.get(e.name) ?? []), path]);
    }
  };
  walk(join(repo, "packages"));
  return out;
}

/** The references of `text`: each `file` with the names quoted after it, up to the closing parenthesis. */
function references(text: string): { file: string; names: string[] }[] {
  const out: { file: string; names: string[] }[] = [];
  // A reference runs from a `x.test.ts` to the next one, or to the end of its parenthesis.
  const flat = text.replace(/\s+/g, " ");
  const re = /`([\w.-]+\.test\.ts)`((?: ?\([^)`]*\))?(?: ?"[^"]*",?)*)/g;
  for (const m of flat.matchAll(re)) {
    out.push({ file: m[1]!, names: [...m[2]!.matchAll(/"([^"]*)"/g)].map((n) => n[1]!) });
  }
  return out;
}

it("names, after each claim, tests that exist", () => {
  const text = readFileSync(join(repo, "docs/security.md"), "utf8");
  const files = testFiles();
  const refs = references(text);
  expect(refs.length).toBeGreaterThan(20);
  expect(refs.flatMap((r) => r.names).length).toBeGreaterThan(40);
  const missing: string[] = [];
  for (const { file, names } of refs) {
    const paths = files.get(file);
    if (!paths) {
      missing.push(`${file}: no such test file`);
      continue;
    }
    const sources = paths.map((p) => readFileSync(p, "utf8").replace(/\s+/g, " "));
    for (const name of names) if (!sources.some((s) => s.includes(name))) missing.push(`${file}: no test named "${name}..."`);
  }
  expect(missing).toEqual([]);
});
