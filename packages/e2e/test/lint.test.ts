/**
 * The tree is formatted and lint-clean (scripts/lint.sh: Biome for the
 * TypeScript and JavaScript, clang-format for the C and C++), so that CI
 * fails on a change that is not. `pnpm format` fixes what it can.
 */
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";

const repo = fileURLToPath(new URL("../../../", import.meta.url));

it("is formatted and passes the linters (pnpm format fixes the formatting)", () => {
  const run = spawnSync("bash", ["scripts/lint.sh"], { cwd: repo, encoding: "utf8", maxBuffer: 64 * 1024 * 1024 });
  if (run.status !== 0) console.log(`${run.stdout}${run.stderr}`.slice(-20_000));
  expect(run.status).toBe(0);
}, 120_000);
