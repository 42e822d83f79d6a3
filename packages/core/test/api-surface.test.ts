/**
 * What each entry point exports is a promise: its declarations, as the
 * built .d.ts files give them (comments and private members aside), are
 * recorded in api/*.api.txt, and a change to them must be recorded too.
 * UPDATE_API=1 rewrites the records from the build.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import ts from "typescript";
import { describe, expect, it } from "vitest";

const root = (path: string) => fileURLToPath(new URL(`../${path}`, import.meta.url));
const ENTRIES = { index: "dist/index.d.ts", backend: "dist/backend.d.ts", testing: "dist/testing/index.d.ts" } as const;

/** One line or block per exported name, sorted: the surface as a text to diff. */
function surface(entry: string): string {
  const file = root(entry);
  const program = ts.createProgram([file], { module: ts.ModuleKind.NodeNext, moduleResolution: ts.ModuleResolutionKind.NodeNext });
  const checker = program.getTypeChecker();
  const printer = ts.createPrinter({ removeComments: true });
  const module = checker.getSymbolAtLocation(program.getSourceFile(file)!)!;
  const blocks: string[] = [];
  for (const exported of checker.getExportsOfModule(module).sort((a, b) => a.name.localeCompare(b.name))) {
    const symbol = exported.flags & ts.SymbolFlags.Alias ? checker.getAliasedSymbol(exported) : exported;
    if (symbol.flags & ts.SymbolFlags.ValueModule) {
      const members = checker
        .getExportsOfModule(symbol)
        .map((m) => m.name)
        .sort();
      blocks.push(`namespace ${exported.name} { ${members.join(", ")} }`);
      continue;
    }
    for (const declaration of symbol.declarations ?? []) {
      const text = printer
        .printNode(ts.EmitHint.Unspecified, declaration, declaration.getSourceFile())
        .split("\n")
        .filter((line) => !/^\s*private\b/.test(line))
        .join("\n");
      blocks.push(exported.name === symbol.name ? text : `${exported.name} = ${text}`);
    }
  }
  return `${blocks.join("\n\n")}\n`;
}

describe("the public surface of @tensorpipe/core", () => {
  it.each(Object.entries(ENTRIES).map(([name, entry]) => ({ name, entry })))("$name is what api/$name.api.txt records", ({ name, entry }) => {
    const record = root(`api/${name}.api.txt`);
    const now = surface(entry);
    if (process.env.UPDATE_API === "1") writeFileSync(record, now);
    expect(
      now,
      `the exports of "${name}" changed: if that is meant, run UPDATE_API=1 pnpm exec vitest run packages/core/test/api-surface.test.ts and commit api/`,
    ).toBe(readFileSync(record, "utf8"));
  });
});
