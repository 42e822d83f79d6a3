// Reads vitest's JSON report and prints the line CI reads:
// "N passed, N failed, N skipped". A test file that failed to load, or
// failed outside its tests, counts as one failed test; so does a file
// whose tests never finished (its worker died: vitest then reports only
// "Worker exited unexpectedly", without the file), and a vitest run that
// failed with nothing else to show for it (an unhandled error, which the
// JSON report does not record), so "0 failed" never follows a failed run.
import { readFileSync } from "node:fs";

const [file, vitestStatus] = process.argv.slice(2);
const r = JSON.parse(readFileSync(file, "utf8"));
let failed = r.numFailedTests;
for (const suite of r.testResults) {
  const failedInside = suite.assertionResults.some((a) => a.status === "failed");
  const unfinished = suite.assertionResults.filter((a) => a.status === "pending");
  if (suite.status === "failed" && !failedInside) {
    console.log(`suite failed outside its tests: ${suite.name}: ${(suite.message ?? "").split("\n")[0]}`);
    failed++;
  } else if (unfinished.length > 0 && !failedInside) {
    console.log(`suite never finished (its worker died?): ${suite.name}: ${unfinished.length} test(s) left running, first "${unfinished[0].fullName}"`);
    failed++;
  }
}
if (failed === 0 && (Number(vitestStatus) !== 0 || r.success === false)) {
  console.log(`vitest failed (exit ${vitestStatus}) with no failed test: an error outside any test (see its output above)`);
  failed = 1;
}
const skipped = r.numPendingTests + r.numTodoTests;
console.log(`${r.numPassedTests} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed > 0 || r.numTotalTests === 0 ? 1 : 0);
