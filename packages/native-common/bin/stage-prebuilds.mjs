#!/usr/bin/env node
// Run as a native package's prepack: copies its built addons to
// prebuilds/<platform>-<arch>/, stripped of debug symbols, so that the
// tarball installs without a compiler: build/Release/ for this machine, and
// build-<platform>-<arch>/Release/ for each cross build
// (scripts/cross-prebuilds.sh).
import { execFileSync } from "node:child_process";
import { copyFileSync, existsSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";

// The binutils that strip another architecture's binaries.
const STRIP = { "linux-arm64": "aarch64-linux-gnu-strip" };

const addonsIn = (dir) => {
  try {
    return readdirSync(dir).filter((f) => f.endsWith(".node"));
  } catch {
    return [];
  }
};

const here = `${process.platform}-${process.arch}`;
const builds = [{ dir: join(process.cwd(), "build", "Release"), platform: here }];
for (const entry of readdirSync(process.cwd())) {
  const m = /^build-([a-z0-9]+-[a-z0-9]+)$/.exec(entry);
  if (m && m[1] !== here) builds.push({ dir: join(process.cwd(), entry, "Release"), platform: m[1] });
}
if (addonsIn(builds[0].dir).length === 0) {
  console.error(`stage-prebuilds: no addon in ${builds[0].dir}; run the package's build first`);
  process.exit(1);
}
for (const { dir, platform } of builds) {
  const addons = addonsIn(dir);
  if (addons.length === 0) continue;
  const target = join(process.cwd(), "prebuilds", platform);
  rmSync(target, { recursive: true, force: true });
  mkdirSync(target, { recursive: true });
  const strip = platform === here ? "strip" : STRIP[platform];
  for (const addon of addons) {
    copyFileSync(join(dir, addon), join(target, addon));
    try {
      if (strip) execFileSync(strip, ["--strip-unneeded", join(target, addon)]);
    } catch {
      // strip is only a size saving
    }
    console.error(`stage-prebuilds: ${addon} -> prebuilds/${platform}/`);
  }
}
// Prebuilds of a platform no longer built would ship stale binaries.
for (const platform of existsSync("prebuilds") ? readdirSync("prebuilds") : []) {
  if (!builds.some((b) => b.platform === platform && addonsIn(b.dir).length > 0)) rmSync(join("prebuilds", platform), { recursive: true, force: true });
}
