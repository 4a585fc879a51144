#!/usr/bin/env bash
# The GPU test run, for a machine with an NVIDIA GPU, CUDA and NCCL. Builds kolo
# with -DKOLO_WITH_CUDA=ON (unless --no-build), then runs, each under a time
# limit: kolo_nccl's unit tests and test_device; the GPU programs of tests/gpu
# through libkolo's public API in CUDA mode (every op x dtype at counts 1, 1003,
# 2^20+3 with guard regions; the stream-order probe; abort from a second thread;
# SIGKILL of a rank; 30 create/destroy cycles; threads racing); the elastic loop with its state
# in GPU memory across a SIGKILL and a join; kolo's all-reduce beside raw NCCL.
# With one GPU, several ranks share it: each gets its own NCCL_HOSTID and NCCL
# talks over sockets on loopback (see tests/gpu/gpu_harness.c). The last line is
#   GPU: N passed, M failed
# and the exit status is 0 only when M is 0 and N > 0. Every "ok"/"not ok" line
# of a program counts, and so do the build and unit steps; a program that
# crashes, times out or skips counts as a failure. With $OUT set (the device
# tool's output folder), the whole log is also written to $OUT/gpu-run.log.
#
# Usage: tests/gpu/run.sh [--quick] [--no-build] [--build-dir DIR] [--ranks N] [--small]
#   --quick    the ~10 minute run on a prebuilt tree (bench up to 64 MiB)
#   --small    tiny counts and sizes (run.sh's own self-test on the CPU stand-in)
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build-gpu"
build=1
quick=0
small=0
ranks=()
while [ $# -gt 0 ]; do
  case "$1" in
    --ranks) ranks=(--ranks "$2"); shift 2 ;;
    --build-dir) BUILD="$2"; shift 2 ;;
    --no-build) build=0; shift ;;
    --quick) quick=1; shift ;;
    --small) small=1; shift ;;
    *) echo "usage: $0 [--quick] [--no-build] [--build-dir DIR] [--ranks N] [--small]" >&2; exit 2 ;;
  esac
done
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then
  exec > >(tee "$OUT/gpu-run.log") 2>&1
fi

passed=0
failed=0
summary() {
  echo "GPU: $passed passed, $failed failed"
  [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
  exit $?
}
export NCCL_DEBUG="${NCCL_DEBUG:-WARN}"
start_s=$SECONDS

echo "== machine"
uptime
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi -L || true
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
  echo "nvidia-smi not found; the programs count devices themselves"
fi

mkdir -p "$BUILD"
if [ "$build" -eq 1 ]; then
  echo "== configure (KOLO_WITH_CUDA=ON)"
  if cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_WITH_CUDA=ON \
      >"$BUILD/kolo-gpu-configure.log" 2>&1; then
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

echo "== unit tests (kolo_nccl, test_device)"
(cd "$BUILD" && ctest --output-on-failure --no-tests=error -R '^(test_nccl_|test_device$)') \
  >"$BUILD/kolo-gpu-unit.log" 2>&1
unit_rc=$?
tail -15 "$BUILD/kolo-gpu-unit.log"
if [ "$unit_rc" -eq 0 ]; then
  echo "ok unit tests"; passed=$((passed + 1))
else
  echo "not ok unit tests"; failed=$((failed + 1))
fi

# Runs one program under a time limit, shows its output, counts its "ok" and
# "not ok" lines; an exit status that disagrees (crash, skip, timeout) counts as
# one more failure.
run_program() {
  local name="$1" limit="$2"; shift 2
  local out rc ok bad t0
  out="$(mktemp)"
  t0=$SECONDS
  echo "== $name"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out"
  rc="${PIPESTATUS[0]}"
  ok="$(grep -c '^ok ' "$out" || true)"
  bad="$(grep -c '^not ok ' "$out" || true)"
  passed=$((passed + ok))
  failed=$((failed + bad))
  if [ "$rc" -eq 77 ]; then
    echo "not ok $name: skipped, no usable GPU"; failed=$((failed + 1)); no_gpu=1
  elif [ "$rc" -ne 0 ] && [ "$bad" -eq 0 ]; then
    echo "not ok $name: exit status $rc"; failed=$((failed + 1))
  elif [ "$rc" -eq 0 ] && [ "$ok" -eq 0 ]; then
    echo "not ok $name: passed without checking anything"; failed=$((failed + 1))
  fi
  echo "# $name: $((SECONDS - t0)) s"
  rm -f "$out"
}

T="$BUILD/tests"
no_gpu=0
max_count=()
bench_size=(--max-bytes 268435456 --iters 20 --rounds 5)
[ "$quick" -eq 1 ] && bench_size=(--max-bytes 67108864 --iters 20 --rounds 5)
if [ "$small" -eq 1 ]; then
  max_count=(--max-count 1003)
  bench_size=(--max-bytes 65536 --iters 3 --rounds 3)
fi
run_program "collectives: op x dtype x counts, guards, send==recv" 900 \
  "$T/kolo-gpu-collectives" "${ranks[@]}" "${max_count[@]}"
run_program "stream order" 300 "$T/kolo-gpu-stream" "${ranks[@]}"
run_program "abort, SIGKILL, NCCL errors" 600 "$T/kolo-gpu-abort" "${ranks[@]}"
run_program "30 create/destroy cycles, pending errors, contexts" 600 "$T/kolo-gpu-cycles" "${ranks[@]}"
run_program "threads: host and device gathers at once, abort during creation" 300 \
  "$T/kolo-gpu-races" "${ranks[@]}"
run_program "named operations on CUDA buffers: negotiated, then NCCL" 300 \
  "$T/kolo-gpu-named" "${ranks[@]}"

# collective/elastic.c in CUDA mode: test_elastic's kill and join scenarios with
# the loop whose state lives in GPU memory (each process its own NCCL_HOSTID).
echo "== elastic re-forms in CUDA mode (test_elastic with kolo-gpu-elastic-loop)"
elastic_out="$(mktemp)"
if [ "$no_gpu" -eq 1 ]; then
  echo "not ok elastic re-forms in CUDA mode: skipped, no usable GPU"; failed=$((failed + 1))
else
  KOLO_ELASTIC_LOOP=kolo-gpu-elastic-loop KOLO_TEST_OWN_HOSTID=1 KOLO_TEST_DIR="$T" \
    timeout --kill-after=10 300 "$T/test_elastic" >"$elastic_out" 2>&1
  elastic_rc=$?
  grep -E '^\[ +(OK|FAILED|PASSED) ' "$elastic_out" || tail -20 "$elastic_out"
  if [ "$elastic_rc" -eq 0 ]; then
    echo "ok elastic re-forms keep CUDA mode and device state"; passed=$((passed + 1))
  else
    tail -30 "$elastic_out"
    echo "not ok elastic re-forms in CUDA mode: exit status $elastic_rc"; failed=$((failed + 1))
  fi
fi
rm -f "$elastic_out"

run_program "all-reduce: kolo beside raw NCCL, 1 rank" 600 "$T/kolo-gpu-bench" --ranks 1 "${bench_size[@]}"
run_program "all-reduce: kolo beside raw NCCL, 2 ranks" 600 "$T/kolo-gpu-bench" --ranks 2 "${bench_size[@]}"

echo "# run.sh: $((SECONDS - start_s)) s after the build"
summary
