#!/usr/bin/env node
// A change to a published package's recorded API (packages/*/api/*.api.txt)
// since its last release needs a pending changeset whose bump says so, as
// semver has it for 0.x: a line removed or changed (a break) needs a minor
// bump (a major one from 1.0 on), a line only added a patch (a minor from
// 1.0 on). The last release is the git tag changesets makes when it
// publishes, <name>@<version>, or, before that tag exists, the commit that
// set the package's version (`pnpm changeset version`); a version not yet
// committed is the release being made. Prints what is missing and exits 1;
// `node scripts/check-api-changesets.mjs [repo]`.
import { execFileSync } from "node:child_process";
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";

const RANK = { patch: 0, minor: 1, major: 2 };

/** The problems in `repo`, one line each (none: the changesets cover every API change). */
export function apiChangesetProblems(repo) {
  const git = (...args) => execFileSync("git", ["-C", repo, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "ignore"] });
  const bumps = pendingBumps(join(repo, ".changeset"));
  const problems = [];
  for (const dir of readdirSync(join(repo, "packages"))) {
    const api = join(repo, "packages", dir, "api");
    if (!existsSync(api)) continue;
    const { name, version } = JSON.parse(readFileSync(join(repo, "packages", dir, "package.json"), "utf8"));
    const release = releaseOf(git, `packages/${dir}/package.json`, name, version);
    if (release === undefined) continue;
    const major = Number(version.split(".")[0]);
    for (const file of readdirSync(api).filter((f) => f.endsWith(".api.txt"))) {
      const now = readFileSync(join(api, file), "utf8").split("\n");
      let then;
      try {
        then = git("show", `${release.rev}:packages/${dir}/api/${file}`).split("\n");
      } catch {
        then = [];
      }
      const had = new Set(then);
      const has = new Set(now);
      const removed = then.filter((l) => !has.has(l));
      const added = now.filter((l) => !had.has(l));
      if (removed.length === 0 && added.length === 0) continue;
      const need = removed.length > 0 ? (major >= 1 ? "major" : "minor") : major >= 1 ? "minor" : "patch";
      const have = bumps.get(name) ?? [];
      if (have.some((b) => RANK[b] >= RANK[need])) continue;
      const what = removed.length > 0 ? `removes or changes ${removed.length} line(s), a break: first "${removed[0].trim()}"` : `adds ${added.length} line(s)`;
      problems.push(
        `${name}: api/${file} ${what} since ${release.label}; add a changeset (pnpm changeset) with a ${need} bump of ${name}${have.length > 0 ? ` (pending: ${have.join(", ")})` : ""}`,
      );
    }
  }
  return problems;
}

/** Where `name@version` was released: its tag, else the commit that set its version. */
function releaseOf(git, manifest, name, version) {
  const tag = `${name}@${version}`;
  if (git("tag", "--list", tag).trim() !== "") return { rev: tag, label: tag };
  for (const commit of git("log", "--format=%H", "-G", '"version"', "--", manifest).split("\n").filter(Boolean)) {
    let then;
    try {
      then = JSON.parse(git("show", `${commit}:${manifest}`)).version;
    } catch {
      continue;
    }
    if (then === version) return { rev: commit, label: `${tag} (set in ${commit.slice(0, 7)}, not tagged)` };
    return undefined;
  }
  return undefined;
}

/** The bumps pending changesets ask for, by package. */
function pendingBumps(dir) {
  const out = new Map();
  if (!existsSync(dir)) return out;
  for (const f of readdirSync(dir).filter((n) => n.endsWith(".md") && n !== "README.md")) {
    const head = /^---\n([\s\S]*?)\n---/.exec(readFileSync(join(dir, f), "utf8"));
    for (const m of head?.[1].matchAll(/^\s*["']?([^"':]+)["']?\s*:\s*(patch|minor|major)\s*$/gm) ?? []) {
      out.set(m[1], [...(out.get(m[1]) ?? []), m[2]]);
    }
  }
  return out;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const problems = apiChangesetProblems(process.argv[2] ?? process.cwd());
  for (const p of problems) console.error(p);
  process.exit(problems.length > 0 ? 1 : 0);
}
