#!/usr/bin/env bash
# Packs what a GPU machine (the `device` tool's, which has no Node) needs
# to run bench-cuda and the CUDA checks: node itself and the built tree
# (every package's manifest, dist/, addons and C baselines, the workspace links between
# them) into .device/bundle.tar.xz, which git ignores: name `.device` in
# `carry`. With --tests it also packs the installed dependencies that
# vitest and `tensorpipe bench` load (zeromq.js's glibc x64 addon alone),
# leaving out the build-time tools (TypeScript, turbo, typedoc, prettier)
# to stay under the tool's 64 MiB.
# There: tar xJf .device/bundle.tar.xz && .device/node packages/bench/dist/scripts/bench-cuda.js
# or, with --tests: bash scripts/device-gpu-checks.sh
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .device
cp "$(command -v node)" .device/node
files=(.device/node)
for p in packages/*; do
  [ -d "$p/dist" ] && files+=("$p/package.json" "$p/dist")
  [ -d "$p/build/Release" ] && while IFS= read -r f; do files+=("$f"); done < <(find "$p/build/Release" -maxdepth 1 -type f \( -name '*.node' -o -name '*.so' -o -perm -u+x \))
  [ -d "$p/node_modules/@tensorpipe" ] && files+=("$p/node_modules/@tensorpipe")
done
excludes=()
if [ "${1:-}" = "--tests" ]; then
  files+=(node_modules package.json vitest.config.ts)
  for p in packages/*; do [ -d "$p/node_modules" ] && files+=("$p/node_modules"); done
  for x in '@turbo+*' 'turbo@*' 'typescript@*' 'typedoc@*' 'prettier@*' '@shikijs+*' '@gerrit0+*' 'lightningcss-*' '@changesets+*'; do
    excludes+=("--exclude=node_modules/.pnpm/$x")
  done
  excludes+=(--exclude='node_modules/.vite*' --exclude='zeromq/build/linux/arm64' --exclude='zeromq/build/*/*/*/musl-*' --exclude='zeromq/build/darwin' --exclude='zeromq/build/win32')
fi
XZ_OPT=-T0 tar cJf .device/bundle.tar.xz "${excludes[@]}" "${files[@]}"
rm .device/node
du -h .device/bundle.tar.xz
