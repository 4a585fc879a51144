#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds kolo twice (release with
# -Werror, and ASan + UBSan), and runs every CTest test in both builds; a test skipped
# without a reason this machine justifies fails the run (scripts/check-skips.py).
# Usage: scripts/test.sh [--no-sanitize] [ctest args...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

sanitize=1
if [ "${1:-}" = "--no-sanitize" ]; then sanitize=0; shift; fi

"$ROOT/scripts/setup.sh"

jobs="$(nproc 2>/dev/null || echo 2)"

echo "== release build (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKOLO_WERROR=ON >/dev/null
cmake --build build -j "$jobs"
echo "== tests (release)"
(cd build && ctest --output-on-failure -j "$jobs" --output-junit "$ROOT/build/junit.xml" "$@")
/usr/bin/python3 "$ROOT/scripts/check-skips.py" build "$ROOT/build/junit.xml"

if [ "$sanitize" -eq 1 ]; then
  echo "== sanitizer build (build-asan/)"
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKOLO_WERROR=ON -DKOLO_SANITIZE=ON >/dev/null
  cmake --build build-asan -j "$jobs"
  echo "== tests (ASan + UBSan)"
  export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  (cd build-asan && ctest --output-on-failure -j "$jobs" -L "unit|integration" -LE "nosan" \
    --output-junit "$ROOT/build-asan/junit.xml" "$@")
  /usr/bin/python3 "$ROOT/scripts/check-skips.py" build-asan "$ROOT/build-asan/junit.xml"

  # libFuzzer targets (tests/fuzz/): clang, ASan + UBSan, each for KOLO_FUZZ_SECONDS
  # from its seed corpus; docs/FUZZING.md runs them longer.
  echo "== fuzz build (build-fuzz/, clang)"
  CC=clang cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=Debug -DKOLO_WERROR=OFF -DKOLO_SANITIZE=ON \
    -DKOLO_FUZZ=ON -DKOLO_WITH_CUDA=OFF -DKOLO_FUZZ_SECONDS="${KOLO_FUZZ_SECONDS:-20}" >/dev/null
  cmake --build build-fuzz -j "$jobs" --target fuzz_all
  echo "== fuzzing (${KOLO_FUZZ_SECONDS:-20} s per target)"
  (cd build-fuzz && ctest --output-on-failure -j "$jobs" -L fuzz)
fi
echo "== all tests passed"
