#!/usr/bin/env bash
# Packs what a GPU machine (the `device` tool's, which has no Node) needs
# to run bench-cuda and the CUDA checks: node itself and the built tree
# (every package's manifest, dist/ and addons, the workspace links between
# them) into .device/bundle.tar.xz, which git ignores: name `.device` in
# `carry`.
# There: tar xJf .device/bundle.tar.xz && .device/node packages/e2e/dist/bench-cuda.js
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device
cp "$(command -v node)" .device/node
files=(.device/node)
for p in packages/*; do
  [ -d "$p/dist" ] && files+=("$p/package.json" "$p/dist")
  for f in "$p"/build/Release/*.node; do [ -e "$f" ] && files+=("$f"); done
  [ -d "$p/node_modules/@tensorpipe" ] && files+=("$p/node_modules/@tensorpipe")
done
XZ_OPT=-T0 tar cJf .device/bundle.tar.xz "${files[@]}"
rm .device/node
du -h .device/bundle.tar.xz
