#!/usr/bin/env bash
# Cross-compiles every native package's addon for linux-arm64 (glibc) with
# Debian's g++-aarch64-linux-gnu, into <package>/build-linux-arm64/; a
# package's prepack (stage-prebuilds) ships it as prebuilds/linux-arm64/.
# Run after scripts/setup.sh. As root with apt it installs the compiler.
#
# musl (Alpine) is not built: Debian has no C++ toolchain for musl
# (musl-tools' musl-gcc is C only, with no libstdc++ built against musl),
# and no musl Node to prove a binary with.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/apt.sh

if ! command -v aarch64-linux-gnu-g++ >/dev/null 2>&1; then
  if can_apt; then apt_install g++-aarch64-linux-gnu || true; fi
  command -v aarch64-linux-gnu-g++ >/dev/null 2>&1 || {
    echo "cross-prebuilds: aarch64-linux-gnu-g++ is missing (apt-get install g++-aarch64-linux-gnu)" >&2
    exit 1
  }
fi

toolchain="$PWD/packages/native-common/cmake/linux-arm64.cmake"
for pkg in packages/*/; do
  grep -q '"cmake-js compile' "$pkg/package.json" || continue
  echo "cross-prebuilds: $pkg for linux-arm64" >&2
  (cd "$pkg" && npx cmake-js rebuild --log-level warn --arch arm64 --out build-linux-arm64 \
    --CDCMAKE_TOOLCHAIN_FILE="$toolchain" >/dev/null)
done
