#!/usr/bin/env bash
# The decoders' fuzzing at a million inputs each (CI runs 10^4): mutated
# upstream frames and hostile descriptors. FUZZ_RUNS overrides the count.
set -euo pipefail
cd "$(dirname "$0")/.."
FUZZ_RUNS="${FUZZ_RUNS:-1000000}" exec pnpm exec vitest run packages/e2e/test/reliability/fuzz.test.ts -t "decoder" --testTimeout=3600000
