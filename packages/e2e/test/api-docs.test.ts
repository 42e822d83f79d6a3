import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { expect, it } from "vitest";

const run = promisify(execFile);
const root = fileURLToPath(new URL("../../../", import.meta.url));

// The API reference (`pnpm docs`) is made from the doc comments: typedoc.json
// treats an exported symbol without one, or a broken link, as an error.
it("documents every exported symbol of every package", async () => {
  // core's README links the docs its prepack copies in beside it: copied first, as a packed core has them.
  await run("pnpm", ["--filter", "@tensorpipe/core", "run", "prepack"], { cwd: root });
  const typedoc = fileURLToPath(new URL("node_modules/typedoc/bin/typedoc", `file://${root}`));
  const result = await run(process.execPath, [typedoc, "--emit", "none", "--logLevel", "Warn"], { cwd: root }).then(
    ({ stdout, stderr }) => ({ code: 0, output: stdout + stderr }),
    (e: { code: number; stdout: string; stderr: string }) => ({ code: e.code, output: e.stdout + e.stderr }),
  );
  const warnings = result.output.split("\n").filter((l) => /warning|error/i.test(l));
  expect(warnings, warnings.join("\n")).toEqual([]);
  expect(result.code).toBe(0);
}, 120_000);
