#!/usr/bin/env bash
# Checks tests/gpu/run.sh itself against an existing build: its last line is
# "GPU: N passed, M failed", its exit status agrees with M, and on a machine
# without a GPU each GPU program is reported as skipped (so counted as failed).
# Usage: run_sh_selftest.sh BUILD_DIR
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$1"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$HERE/run.sh" --no-build --build-dir "$build" >"$out" 2>&1
rc=$?
last="$(tail -n 1 "$out")"
if ! [[ "$last" =~ ^GPU:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
  echo "FAIL: last line is not the summary: '$last'"; exit 1
fi
passed="${BASH_REMATCH[1]}"
failed="${BASH_REMATCH[2]}"
if [ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]; then want=0; else want=1; fi
if [ "$rc" -ne "$want" ]; then
  echo "FAIL: exit status $rc with '$last'"; exit 1
fi
if ! grep -q '^ok unit tests$' "$out"; then
  echo "FAIL: the unit tests did not pass inside run.sh"; cat "$out"; exit 1
fi
if ! command -v nvidia-smi >/dev/null 2>&1; then
  skipped="$(grep -c 'skipped, no usable GPU$' "$out" || true)"
  if [ "$skipped" -ne 3 ] || [ "$failed" -ne 3 ] || [ "$passed" -ne 1 ]; then
    echo "FAIL: without a GPU expected 3 skipped programs, 1 passed, 3 failed:"; cat "$out"; exit 1
  fi
fi
echo "run.sh summary consistent: $last (exit $rc)"
