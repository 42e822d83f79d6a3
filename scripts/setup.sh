#!/usr/bin/env bash
# Sets up a fresh machine from a clean clone: pnpm (if missing), the
# workspace's dependencies, then every package built (TypeScript and addons).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/apt.sh
export TURBO_TELEMETRY_DISABLED=1

if ! command -v pnpm >/dev/null 2>&1 || [[ "$(pnpm --version 2>/dev/null)" != 10.* ]]; then
  npm install -g pnpm@10 --no-fund --no-audit --loglevel=error
fi
if ! command -v cmake >/dev/null 2>&1 || ! command -v g++ >/dev/null 2>&1; then
  echo "setup: cmake and g++ are needed for the native addons (apt-get install cmake g++)" >&2
  exit 1
fi
# The multi-host tests drop packets with nftables; without it they run on clean links.
if ! command -v nft >/dev/null 2>&1 && can_apt; then
  apt_install nftables ||
    echo "setup: nftables not installed; multi-host tests will run without packet loss" >&2
fi
# channel-cuda-gdr compiles against rdma-core's <infiniband/verbs.h> (the
# library itself is loaded at run time); without it its addon builds but
# reports that it was built without it.
if [[ ! -e /usr/include/infiniband/verbs.h ]] && can_apt; then
  apt_install libibverbs-dev ||
    echo "setup: libibverbs-dev not installed; cuda-gdr will say it was built without <infiniband/verbs.h>" >&2
fi
# Upstream C++ TensorPipe, for the live interop peer (packages/e2e/cpp-peer).
if [[ ! -e /usr/include/tensorpipe/tensorpipe.h ]] && can_apt; then
  apt_install libtensorpipe-dev ||
    echo "setup: libtensorpipe-dev not installed; the C++ peer tests will be skipped" >&2
fi
# etcd, for @tensorpipe/cluster's tests (they start their own on free ports).
if ! command -v etcd >/dev/null 2>&1 && can_apt; then
  apt_install etcd-server ||
    echo "setup: etcd-server not installed; the cluster's etcd tests will be skipped" >&2
fi
pnpm install --frozen-lockfile --reporter=append-only
pnpm build
