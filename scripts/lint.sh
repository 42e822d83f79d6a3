#!/usr/bin/env bash
# Checks that the tree is formatted and lint-clean: Biome for TypeScript and
# JavaScript, clang-format for C and C++. `bash scripts/lint.sh --fix`
# formats in place and applies Biome's safe fixes instead.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=node_modules/.bin
mapfile -t native < <(git ls-files '*.c' '*.cc' '*.h')
if [[ "${1:-}" == "--fix" ]]; then
  "$bin/biome" check --write .
  "$bin/clang-format" -i --style=file "${native[@]}"
else
  "$bin/biome" check .
  "$bin/clang-format" --dry-run -Werror --style=file "${native[@]}"
fi
