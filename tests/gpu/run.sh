#!/usr/bin/env bash
# The GPU test run, for a machine with NVIDIA GPUs, CUDA and NCCL: configures
# kolo with -DKOLO_WITH_CUDA=ON, builds it, runs kolo_nccl's unit tests, the GPU
# correctness test (every op x dtype vs a host reference, one rank per GPU), the
# abort-and-re-create test and the all-reduce benchmark, then prints one line:
#   GPU: N passed, M failed
# Usage: tests/gpu/run.sh [--ranks N] [--build-dir DIR] [--no-build] [--quick]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build-gpu"
ranks=()
build=1
quick=()
bench_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=(--ranks "$2"); shift 2 ;;
    --build-dir) BUILD="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --quick) quick=(--quick); bench_args=(--max-bytes 16777216 --iters 10); shift ;;
    *) echo "usage: $0 [--ranks N] [--build-dir DIR] [--no-build] [--quick]" >&2; exit 2 ;;
  esac
done

passed=0
failed=0
summary() {
  echo "GPU: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
  exit $?
}
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"

echo "== machine"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L || true
  gpus="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)"
else
  echo "nvidia-smi not found; the test programs count devices themselves"
  gpus="?"
fi
echo "GPUs: $gpus"
[ "$gpus" = "1" ] && echo "one GPU: only the 1-rank variants run (NCCL refuses two ranks on one GPU)"

mkdir -p "$BUILD"
if [ "$build" -eq 1 ]; then
  echo "== configure (KOLO_WITH_CUDA=ON)"
  if cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_WITH_CUDA=ON >"$BUILD/kolo-gpu-configure.log" 2>&1; then
    grep "kolo:" "$BUILD/kolo-gpu-configure.log" || true
    echo "ok configure"; passed=$((passed + 1))
  else
    cat "$BUILD/kolo-gpu-configure.log"
    echo "not ok configure"; failed=$((failed + 1)); summary
  fi
  echo "== build"
  if cmake --build "$BUILD" -j "$(nproc 2>/dev/null || echo 4)" >"$BUILD/kolo-gpu-build.log" 2>&1; then
    echo "ok build"; passed=$((passed + 1))
  else
    tail -50 "$BUILD/kolo-gpu-build.log"
    echo "not ok build"; failed=$((failed + 1)); summary
  fi
fi

echo "== unit tests (kolo_nccl, need no GPU)"
(cd "$BUILD" && ctest --output-on-failure --no-tests=error -R '^test_nccl_') >"$BUILD/kolo-gpu-unit.log" 2>&1
unit_rc=$?
tail -15 "$BUILD/kolo-gpu-unit.log"
if [ "$unit_rc" -eq 0 ]; then
  echo "ok unit tests"; passed=$((passed + 1))
else
  echo "not ok unit tests"; failed=$((failed + 1))
fi

# Runs one GPU program with a time limit, shows its output, counts its "ok" and
# "not ok" lines; an exit status that disagrees (crash, skip, timeout) counts as
# one more failure.
run_program() {
  local name="$1" limit="$2"; shift 2
  local out rc ok bad
  out="$(mktemp)"
  echo "== $name"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out"
  rc="${PIPESTATUS[0]}"
  ok="$(grep -c '^ok ' "$out" || true)"
  bad="$(grep -c '^not ok ' "$out" || true)"
  passed=$((passed + ok))
  failed=$((failed + bad))
  if [ "$rc" -eq 77 ]; then
    echo "not ok $name: skipped, no usable GPU"; failed=$((failed + 1))
  elif [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
    echo "not ok $name: exit status $rc"; failed=$((failed + 1))
  fi
  rm -f "$out"
}

run_program "collectives (every op x dtype vs host reference)" 600 \
  "$BUILD/tests/kolo-gpu-collectives" "${ranks[@]}" "${quick[@]}"
run_program "abort and re-create" 600 "$BUILD/tests/kolo-gpu-abort" "${ranks[@]}"
run_program "all-reduce benchmark (nccl-tests columns)" 600 \
  "$BUILD/tests/kolo-gpu-bench" "${ranks[@]}" "${bench_args[@]}"
summary
