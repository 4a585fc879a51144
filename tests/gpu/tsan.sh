#!/usr/bin/env bash
# ThreadSanitizer over libkolo's GPU path: builds kolo with -fsanitize=thread in
# DIR (default build-tsan), then runs the GPU programs on the CPU stand-in
# (tests/support/fakegpu) and prints, per program, its checks and the number of
# data races TSan reported. Exit status 0 only when every check passed and no
# race was reported. Not part of CI (a TSan build of everything takes long on
# two cores); run it after changing collective/device.c or collective/nccl/.
# Usage: tests/gpu/tsan.sh [DIR]
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-$ROOT/build-tsan}"
flags="-fsanitize=thread -g -O1"
mkdir -p "$BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS="$flags" \
  -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread -DCMAKE_SHARED_LINKER_FLAGS=-fsanitize=thread \
  >"$BUILD/configure.log" 2>&1 || { cat "$BUILD/configure.log"; exit 1; }
programs=(races abort stream cycles collectives)
targets=(kolo_fakegpu)
for p in "${programs[@]}"; do targets+=("kolo-gpu-$p"); done
cmake --build "$BUILD" -j "$(nproc 2>/dev/null || echo 2)" --target "${targets[@]}" >"$BUILD/build.log" 2>&1 ||
  { tail -30 "$BUILD/build.log"; exit 1; }
export TSAN_OPTIONS="halt_on_error=0 report_signal_unsafe=0"
export LD_LIBRARY_PATH="$BUILD/fakegpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKEGPU_DEVICES=2
status=0
for p in "${programs[@]}"; do
  args=(--ranks 2)
  [ "$p" = abort ] && args=(--ranks 3)
  [ "$p" = collectives ] && args+=(--max-count 1003)
  log="$BUILD/tsan-$p.log"
  timeout 600 "$BUILD/tests/kolo-gpu-$p" "${args[@]}" >"$log" 2>&1
  rc=$?
  races="$(grep -c 'WARNING: ThreadSanitizer' "$log" || true)"
  echo "$p: exit $rc, $(grep -c '^ok ' "$log" || true) ok, $(grep -c '^not ok ' "$log" || true) not ok, $races races (log: $log)"
  if [ "$rc" -ne 0 ] || [ "$races" -ne 0 ]; then status=1; fi
done
exit "$status"
