// Reads vitest's JSON report and prints the line CI reads:
// "N passed, N failed, N skipped". A test file that failed to load, or
// failed outside its tests, counts as one failed test; so does a vitest
// run that failed with nothing else to show for it (an unhandled error,
// which the JSON report does not record), so "0 failed" never follows a
// failed run.
import { readFileSync } from "node:fs";

const [file, vitestStatus] = process.argv.slice(2);
const r = JSON.parse(readFileSync(file, "utf8"));
let failed = r.numFailedTests;
for (const suite of r.testResults) {
  const failedInside = suite.assertionResults.some((a) => a.status === "failed");
  if (suite.status === "failed" && !failedInside) {
    console.log(`suite failed outside its tests: ${suite.name}: ${(suite.message ?? "").split("\n")[0]}`);
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
