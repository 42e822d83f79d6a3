import { execFile } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it, onTestFinished } from "vitest";

const run = promisify(execFile);
const script = fileURLToPath(new URL("../../../scripts/device-gpu-checks.sh", import.meta.url));

// A lent GPU machine gives the checks one command of 600 s at most: the
// script must end inside its deadline, with the report written, whatever
// a step does. Here the bench cannot finish in what is left to it, so it
// is cut at its share, the step after it is skipped, and the report says so.
describe.skipIf(process.platform !== "linux")("device-gpu-checks.sh within its deadline", () => {
  it("cuts a step at what is left, skips the steps with no time left and still writes the report", async () => {
    const out = mkdtempSync(join(tmpdir(), "tp-device-checks-"));
    onTestFinished(() => rmSync(out, { recursive: true, force: true }));
    const deadline = 42;
    const started = performance.now();
    const { stdout } = await run("bash", [script, "bench", "ipc-baseline", "report"], {
      env: { ...process.env, OUT: out, TP_DEVICE_NODE: process.execPath, TP_DEVICE_SECONDS: String(deadline), TP_DEVICE_REPORT_INTO: join(out, "docs") },
    });
    const seconds = (performance.now() - started) / 1000;
    expect(seconds).toBeLessThan(deadline);
    expect(stdout).toContain("== ipc-baseline skipped");

    const steps = readFileSync(join(out, "steps.txt"), "utf8")
      .trim()
      .split("\n")
      .map((l) => l.split(" "));
    // The report keeps 30 s for itself: the bench has the other 12.
    expect(steps.map(([name, state, , , allowed]) => [name, state, allowed])).toEqual([
      ["bench", "timed-out", "12"],
      ["ipc-baseline", "skipped", "0"],
      ["report", "done", expect.stringMatching(/^(29|30)$/)],
    ]);

    const [page] = readdirSync(join(out, "docs"));
    const text = readFileSync(join(out, "docs", page!), "utf8");
    // bash counts whole seconds: a 12 s step started late in a second reads 13.
    expect(text).toMatch(/\| bench \| timed-out \| 124 \| 1[23] \| 12 \|/);
    expect(text).toContain("| ipc-baseline | skipped | - | 0 | 0 |");
    expect(text).toContain("| GPU | unknown (bench-cuda left no output) |");
    expect(text).toContain("(missing: the ipc-baseline step left no output");
  });
});
