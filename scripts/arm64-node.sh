#!/usr/bin/env bash
# An arm64 Node from Debian's packages, run under qemu-user, to prove the
# linux-arm64 prebuilds on an x86-64 machine: unpacks nodejs:arm64 and the
# libraries it needs into .ci/out/arm64-node/sysroot (nothing is installed
# for arm64 system-wide) and writes .ci/out/arm64-node/node, a wrapper that
# runs it. As root with apt it installs qemu-user and adds the arm64
# architecture to apt's sources.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/.ci/out/arm64-node"
if [[ -x "$out/node" ]] && "$out/node" -e 0 2>/dev/null; then
  echo "$out/node"
  exit 0
fi

source scripts/apt.sh
if ! command -v qemu-aarch64 >/dev/null 2>&1; then
  if can_apt; then apt_install qemu-user || true; fi
  command -v qemu-aarch64 >/dev/null 2>&1 || { echo "arm64-node: qemu-aarch64 is missing (apt-get install qemu-user)" >&2; exit 1; }
fi
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  [[ $(id -u) == 0 ]] || { echo "arm64-node: apt has no arm64 packages (dpkg --add-architecture arm64, as root)" >&2; exit 1; }
  dpkg --add-architecture arm64
  apt-get update -qq >/dev/null 2>&1
fi

rm -rf "$out"
mkdir -p "$out/debs" "$out/sysroot"
# nodejs:arm64 with the arm64 libraries it links and the architecture-free
# packages (acorn, cjs-module-lexer, undici, ...) it loads at start.
pkgs=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces --no-enhances \
  nodejs:arm64 2>/dev/null | grep -v '^ ' | grep -v '<' | sort -u |
  grep -E '^([^:]+:arm64|node-[^:]*)$' | grep -v -E '^(dpkg|tar|install-info|openssl|debconf|libperl|libpython|libgdbm|libdb)')
(cd "$out/debs" && apt-get download $pkgs >/dev/null 2>&1) || { echo "arm64-node: apt-get download failed for: $pkgs" >&2; exit 1; }
for deb in "$out"/debs/*.deb; do dpkg -x "$deb" "$out/sysroot"; done
rm -rf "$out/debs"
cat >"$out/node" <<EOF
#!/bin/sh
exec $(command -v qemu-aarch64) -L "$out/sysroot" "$out/sysroot/usr/bin/node" "\$@"
EOF
chmod +x "$out/node"
"$out/node" -e 'if (process.arch !== "arm64") process.exit(1)' || { echo "arm64-node: the arm64 node does not start under qemu" >&2; exit 1; }
echo "$out/node"
