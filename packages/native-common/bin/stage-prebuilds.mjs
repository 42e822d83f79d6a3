#!/usr/bin/env node
// Run as a native package's prepack: copies its built addons
// (build/Release/*.node) to prebuilds/<platform>-<arch>/, stripped of
// debug symbols, so that the tarball installs without a compiler.
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";

const built = join(process.cwd(), "build", "Release");
let addons = [];
try {
  addons = readdirSync(built).filter((f) => f.endsWith(".node"));
} catch {
  // reported below
}
if (addons.length === 0) {
  console.error(`stage-prebuilds: no addon in ${built}; run the package's build first`);
  process.exit(1);
}
const target = join(process.cwd(), "prebuilds", `${process.platform}-${process.arch}`);
rmSync(target, { recursive: true, force: true });
mkdirSync(target, { recursive: true });
for (const addon of addons) {
  copyFileSync(join(built, addon), join(target, addon));
  try {
    execFileSync("strip", ["--strip-unneeded", join(target, addon)]);
  } catch {
    // strip is only a size saving
  }
  console.error(`stage-prebuilds: ${addon} -> prebuilds/${process.platform}-${process.arch}/`);
}
