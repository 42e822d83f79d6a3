/** What a backend says when its addon is not there: what was looked for, and how to build it. */
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { afterEach, expect, it } from "vitest";
import { nativeAddonLoader } from "../src/native-addon.js";

const made: string[] = [];
afterEach(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** A package root with these prebuilds folders, none of them holding the addon; the loader of its dist/. */
function packageWith(platforms: string[]) {
  const root = mkdtempSync(join(tmpdir(), "tp-addon-"));
  made.push(root);
  for (const p of platforms) mkdirSync(join(root, "prebuilds", p), { recursive: true });
  return nativeAddonLoader(pathToFileURL(join(root, "dist", "index.js")), "tensorpipe_x");
}

it("names the platforms it ships where this one is not among them", () => {
  expect(packageWith(["linux-riscv64"])().error?.message).toMatch(
    new RegExp(`^tensorpipe_x\\.node: there is no prebuilt binary for ${process.platform}-${process.arch} \\(this package has linux-riscv64\\)\\. Build it`),
  );
});

it("says the binary is missing where this platform's folder is there without it", () => {
  const here = `${process.platform}-${process.arch}`;
  const message = packageWith([here, "linux-riscv64"])().error?.message;
  expect(message).toMatch(new RegExp(`^tensorpipe_x\\.node: prebuilds/${here} has no tensorpipe_x\\.node`));
  expect(message).not.toMatch(/there is no prebuilt binary/);
});
