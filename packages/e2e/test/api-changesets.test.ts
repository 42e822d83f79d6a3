/**
 * A change to a published package's recorded API needs a changeset that
 * says so (scripts/check-api-changesets.mjs): this repository as it is, and
 * a small one that plays a release and the changes after it.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, describe, expect, it } from "vitest";
// @ts-expect-error: a plain script of the repository, without types
import { apiChangesetProblems } from "../../../scripts/check-api-changesets.mjs";

const repo = fileURLToPath(new URL("../../../", import.meta.url));
const problems = apiChangesetProblems as (repo: string) => string[];

describe("API changes and changesets", () => {
  it("every change to a recorded API since its package's last release has a changeset that covers it", () => {
    expect(problems(repo)).toEqual([]);
  });

  describe("in a repository released as @x/core@0.3.0", () => {
    const dir = mkdtempSync(join(tmpdir(), "api-changesets-"));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const git = (...args: string[]) => execFileSync("git", ["-C", dir, ...args], { stdio: "pipe" });
    const api = (...lines: string[]) => writeFileSync(join(dir, "packages/core/api/index.api.txt"), `${lines.join("\n")}\n`);
    const changeset = (bump: string | undefined) => {
      rmSync(join(dir, ".changeset/next.md"), { force: true });
      if (bump) writeFileSync(join(dir, ".changeset/next.md"), `---\n"@x/core": ${bump}\n---\n\nWhat changed.\n`);
    };
    mkdirSync(join(dir, "packages/core/api"), { recursive: true });
    mkdirSync(join(dir, ".changeset"));
    writeFileSync(join(dir, "packages/core/package.json"), JSON.stringify({ name: "@x/core", version: "0.3.0" }));
    api("export declare function open(url: string): Pipe;", "export declare const DONE: Promise<void>;");
    git("init", "-q");
    git("add", ".");
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "release");
    git("tag", "@x/core@0.3.0");

    it("nothing changed: nothing needed", () => {
      changeset(undefined);
      expect(problems(dir)).toEqual([]);
    });

    it("a line removed is a break: refused without a changeset, and with a patch, taken with a minor", () => {
      api("export declare function open(url: string): Pipe;");
      changeset(undefined);
      expect(problems(dir)).toEqual([
        expect.stringMatching(/^@x\/core: api\/index\.api\.txt removes or changes 1 line\(s\), a break: .*DONE.*a minor bump of @x\/core$/),
      ]);
      changeset("patch");
      expect(problems(dir)).toEqual([expect.stringMatching(/a minor bump of @x\/core \(pending: patch\)$/)]);
      changeset("minor");
      expect(problems(dir)).toEqual([]);
    });

    it("a line only added needs a patch", () => {
      api("export declare function open(url: string): Pipe;", "export declare const DONE: Promise<void>;", "export declare function close(): void;");
      changeset(undefined);
      expect(problems(dir)).toEqual([expect.stringMatching(/adds 1 line\(s\) since @x\/core@0\.3\.0; .*a patch bump/)]);
      changeset("patch");
      expect(problems(dir)).toEqual([]);
    });

    it("fails CI from the command line, naming what is missing", () => {
      api("export declare function open(url: string): Pipe;");
      changeset(undefined);
      const run = () => execFileSync(process.execPath, [join(repo, "scripts/check-api-changesets.mjs"), dir], { stdio: "pipe" });
      expect(run).toThrow(/a minor bump of @x\/core/);
    });
  });
  describe("in a repository whose version 0.3.0 was set by `changeset version` but never tagged", () => {
    const dir = mkdtempSync(join(tmpdir(), "api-changesets-"));
    afterAll(() => rmSync(dir, { recursive: true, force: true }));
    const git = (...args: string[]) => execFileSync("git", ["-C", dir, ...args], { stdio: "pipe" }).toString();
    const commit = (message: string) => {
      git("add", ".");
      git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", message);
    };
    const manifest = (version: string) => writeFileSync(join(dir, "packages/core/package.json"), `${JSON.stringify({ name: "@x/core", version }, null, 2)}\n`);
    const api = (...lines: string[]) => writeFileSync(join(dir, "packages/core/api/index.api.txt"), `${lines.join("\n")}\n`);
    mkdirSync(join(dir, "packages/core/api"), { recursive: true });
    mkdirSync(join(dir, ".changeset"));
    manifest("0.2.0");
    api("export declare function open(url: string): Pipe;", "export declare const DONE: Promise<void>;");
    git("init", "-q");
    commit("start");
    manifest("0.3.0");
    commit("version packages");
    const released = git("rev-parse", "--short=7", "HEAD").trim();
    api("export declare function open(url: string): Pipe;");
    commit("remove DONE");

    it("the commit that set the version is the release: a break after it needs a changeset", () => {
      expect(problems(dir)).toEqual([
        expect.stringContaining(`since @x/core@0.3.0 (set in ${released}, not tagged); add a changeset (pnpm changeset) with a minor bump`),
      ]);
    });

    it("a version set in the working tree is the release being made: nothing needed", () => {
      manifest("0.4.0");
      expect(problems(dir)).toEqual([]);
      manifest("0.3.0");
    });
  });
});
