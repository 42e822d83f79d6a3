#!/usr/bin/env bash
# The GPU checks, run on a device machine in the repository root with
# .device carried (`bash scripts/device-bundle.sh --tests` here): the CUDA
# packages' tests against the real driver, the C exchange of IPC handles,
# bench-cuda with its sweep, `tensorpipe bench` on that machine's cores and
# cma by copier threads (cma-threads.js: whether the kernel's copy or the
# library holds shm+cma below memcpy there);
# then `report` writes docs/benchmarks/<date>-<gpu>.md from them (and a copy
# in $OUT, which is what comes back). Each step's output goes to
# $OUT/<step>.txt; a step that fails does not stop the next.
#   bash scripts/device-gpu-checks.sh [steps...]   (default: machine tests ipc-baseline bench-cuda bench cma-threads report)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-$PWD/.device/out}
mkdir -p "$out"
[ -x .device/node ] || tar xJf .device/bundle.tar.xz
node=$PWD/.device/node
export NO_COLOR=1
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(machine tests ipc-baseline bench-cuda bench cma-threads report)

step() {
  local name=$1 limit=$2
  shift 2
  echo "== $name ($(date -u +%T))"
  timeout "$limit" "$@" >"$out/$name.txt" 2>&1
  local rc=$?
  echo "   rc=$rc"
  tail -n 40 "$out/$name.txt"
}

for s in "${steps[@]}"; do
  case $s in
    machine) step machine 60 bash -c "nvidia-smi; ldconfig -p | grep -E 'libcuda|libibverbs'; echo LD_LIBRARY_PATH=\$LD_LIBRARY_PATH; nvidia-smi --query-gpu=name,driver_version,pci.bus_id,memory.total --format=csv; nvcc --version | tail -2; uname -a; ldd --version | head -1; nproc; free -g; $node --version; $node packages/cli/dist/main.js doctor" ;;
    tests) step tests 150 "$node" node_modules/vitest/vitest.mjs run --project cuda --project channel-cuda-basic --project channel-cuda-ipc --project channel-cuda-gdr --reporter=verbose ;;
    bench-cuda) step bench-cuda 240 "$node" packages/bench/dist/scripts/bench-cuda.js --rounds 5 --json ;;
    ipc-baseline) step ipc-baseline 120 bash -c 'for m in event sender-sync local; do for s in 8 1048576 268435456; do echo "$m $s $(packages/bench/build/Release/cuda_ipc_baseline $s 100 $m)"; done; done' ;;
    bench) step bench 300 "$node" packages/bench/dist/main.js --rounds 3 --json "$out/bench.json" --svg "$out/bench.svg" ;;
    cma-threads) step cma-threads 240 "$node" packages/bench/dist/scripts/cma-threads.js --rounds 3 --json ;;
    report) step report 60 "$node" packages/bench/dist/scripts/gpu-report.js "$out" --into docs/benchmarks ;;
    all-tests) step all-tests 420 "$node" node_modules/vitest/vitest.mjs run ;;
    *) echo "unknown step $s" >&2; exit 2 ;;
  esac
done
