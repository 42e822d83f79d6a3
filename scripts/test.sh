#!/usr/bin/env bash
# Runs the whole test suite with vitest's JSON reporter and ends with the
# line CI reads: "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
pnpm exec vitest run --reporter=default --reporter=json --outputFile.json="$out/results.json"
status=$?
if [[ ! -s "$out/results.json" ]]; then
  echo "vitest wrote no results"
  echo "0 passed, 1 failed"
  exit 1
fi
node scripts/test-summary.mjs "$out/results.json" "$status"
summary=$?
[[ $status -ne 0 ]] && exit $status
exit $summary
