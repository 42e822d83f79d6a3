/**
 * Third parties' backends, from the outside: each of examples/ is
 * copied into a fresh project, installed with npm from the packed tarballs
 * of @tensorpipe/core and @tensorpipe/transport-uv alone, compiled with
 * tsc --strict against the published declarations (skipLibCheck off: they
 * must compile too), and its tests (the published conformance and
 * negotiation suites) run there. The project's dev tools, typescript,
 * vitest and @types/node, are the repository's own, linked in: npm
 * installs offline here.
 */
import { execFileSync } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, realpathSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, expect, it } from "vitest";

const repo = fileURLToPath(new URL("../../../", import.meta.url));
const root = mkdtempSync(join(tmpdir(), "tp-example-"));
afterAll(() => rmSync(root, { recursive: true, force: true }));

/**
 * Each example: its directory, the tests its run counts, and the packages
 * it needs besides core's and uv's tarballs, linked in from the
 * repository (npm installs offline here) and left out of what npm installs.
 */
const EXAMPLES = [
  { dir: "inline-channel", tests: 17, linked: [] as string[] },
  { dir: "crc32c-channel", tests: 19, linked: ["@node-rs/crc32"] },
];

it.each(EXAMPLES)(
  "$dir builds strict from the tarballs and passes the conformance and negotiation suites",
  ({ dir, tests, linked }) => {
    const packs = join(root, `packs-${dir}`);
    const app = join(root, dir);
    mkdirSync(packs);
    const tarballs = ["core", "transport-uv"].map((name) => {
      const before = new Set(readdirSync(packs));
      execFileSync("pnpm", ["pack", "--pack-destination", packs], { cwd: join(repo, "packages", name), stdio: "pipe" });
      return join(packs, readdirSync(packs).find((f) => !before.has(f))!);
    });
    cpSync(join(repo, "examples", dir), app, { recursive: true, filter: (src) => !/node_modules|dist/.test(src) });
    const manifest = JSON.parse(readFileSync(join(app, "package.json"), "utf8")) as { dependencies?: Record<string, string> };
    for (const name of linked) delete manifest.dependencies?.[name];
    writeFileSync(join(app, "package.json"), JSON.stringify(manifest));
    const npm = realpathSync(execFileSync("sh", ["-c", "command -v npm"], { encoding: "utf8" }).trim());
    execFileSync(process.execPath, [npm, "install", "--offline", "--no-audit", "--no-fund", "--no-save", ...tarballs], {
      cwd: app,
      env: { ...process.env, npm_config_cache: join(root, "npm-cache"), npm_config_update_notifier: "false" },
      stdio: "pipe",
    });
    mkdirSync(join(app, "node_modules/@types"), { recursive: true });
    for (const tool of ["typescript", "vitest", "@types/node"]) symlinkSync(realpathSync(join(repo, "node_modules", tool)), join(app, "node_modules", tool));
    for (const name of linked) {
      mkdirSync(dirname(join(app, "node_modules", name)), { recursive: true });
      symlinkSync(realpathSync(join(repo, "packages/e2e/node_modules", name)), join(app, "node_modules", name));
    }
    const tsc = (args: string[]) => execFileSync(process.execPath, [join(app, "node_modules/typescript/bin/tsc"), ...args], { cwd: app, encoding: "utf8" });
    try {
      tsc(["-p", app]);
    } catch (e) {
      throw new Error(`tsc --strict failed:\n${(e as { stdout: string }).stdout}`);
    }
    // Limits far below what the suites need: they set their own, whatever the runner's.
    const limits = ["--testTimeout=1000", "--hookTimeout=1000"];
    const out = execFileSync(process.execPath, [join(app, "node_modules/vitest/vitest.mjs"), "run", "--root", app, ...limits], {
      cwd: app,
      encoding: "utf8",
      env: { ...process.env, CI: "1", NO_COLOR: "1" },
    }).replace(/\x1b\[[0-9;]*m/g, "");
    expect(out).toMatch(new RegExp(`Tests\\s+${tests} passed \\(${tests}\\)`));
  },
  240_000,
);
