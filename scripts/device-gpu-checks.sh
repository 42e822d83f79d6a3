#!/usr/bin/env bash
# The GPU checks, run on a device machine in the repository root with
# .device carried (`bash scripts/device-bundle.sh --tests` here): the CUDA
# packages' tests against the real driver, the C exchange of IPC handles,
# bench-cuda with its sweep, cma by copier threads (cma-threads.js: whether
# the kernel's copy or the library holds shm+cma below memcpy there) and
# `tensorpipe bench` on that machine's cores;
# then `report` writes docs/benchmarks/<date>-<gpu>.md from them (and a copy
# in $OUT, which is what comes back). Each step's output goes to
# $OUT/<step>.txt and a line per step to $OUT/steps.txt (name; done,
# timed-out or skipped; exit status; seconds taken; seconds allowed); a
# step that fails does not stop the next.
#   bash scripts/device-gpu-checks.sh [steps...]   (default: machine tests ipc-baseline bench-cuda cma-threads bench report)
# The whole run ends within TP_DEVICE_SECONDS (default 540): a lent
# machine gives one command 600 s and a session 900 s in all, its start
# included, so the checks must fit one call. A step gets its own limit or
# what is left, less REPORT_RESERVE for the report; one that would get
# under MIN_STEP seconds is skipped, and the report says so.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/.device/out}
mkdir -p "$out"
# The test runs the script here: with this machine's node (TP_DEVICE_NODE),
# writing its page outside the repository (TP_DEVICE_REPORT_INTO).
node=${TP_DEVICE_NODE:-$PWD/.device/node}
[ -x "$node" ] || tar xJf .device/bundle.tar.xz
export NO_COLOR=1
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(machine tests ipc-baseline bench-cuda cma-threads bench report)
deadline=$((SECONDS + ${TP_DEVICE_SECONDS:-540}))
REPORT_RESERVE=30
MIN_STEP=10

step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - SECONDS))
  [ "$name" = report ] || left=$((left - REPORT_RESERVE))
  # A step cut at its limit may end a second past it: none is left, not less.
  [ "$left" -lt 0 ] && left=0
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt "$MIN_STEP" ]; then
    echo "== $name skipped: ${left}s left of TP_DEVICE_SECONDS"
    echo "$name skipped - 0 $left" >>"$out/steps.txt"
    return
  fi
  echo "== $name ($(date -u +%T), at most ${limit}s)"
  local start=$SECONDS
  timeout -k 5 "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  local state=done
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && state=timed-out
  echo "$name $state $rc $((SECONDS - start)) $limit" >>"$out/steps.txt"
  echo "   rc=$rc $state in $((SECONDS - start))s"
  tail -n 40 "$out/$name.txt"
}

for s in "${steps[@]}"; do
  case $s in
    machine) step machine 60 bash -c "nvidia-smi; ldconfig -p | grep -E 'libcuda|libibverbs'; echo LD_LIBRARY_PATH=\$LD_LIBRARY_PATH; nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv; nvcc --version | tail -2; uname -a; ldd --version | head -1; nproc; free -g; $node --version; $node packages/cli/dist/main.js doctor" ;;
    tests) step tests 150 "$node" node_modules/vitest/vitest.mjs run --project cuda --project channel-cuda-basic --project channel-cuda-ipc --project channel-cuda-gdr --reporter=verbose ;;
    bench-cuda) step bench-cuda 180 "$node" packages/bench/dist/scripts/bench-cuda.js --rounds 5 --json ;;
    ipc-baseline) step ipc-baseline 60 bash -c 'for m in event sender-sync local; do for s in 8 1048576 268435456; do echo "$m $s $(packages/bench/build/Release/cuda_ipc_baseline $s 100 $m)"; done; done' ;;
    cma-threads) step cma-threads 120 "$node" packages/bench/dist/scripts/cma-threads.js --rounds 3 --json ;;
    bench) step bench 150 "$node" packages/bench/dist/main.js --sizes 8,64K,1M,64M --rounds 3 --json "$out/bench.json" --svg "$out/bench.svg" ;;
    report) step report 30 "$node" packages/bench/dist/scripts/gpu-report.js "$out" --into "${TP_DEVICE_REPORT_INTO:-docs/benchmarks}" ;;
    all-tests) step all-tests 420 "$node" node_modules/vitest/vitest.mjs run ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
