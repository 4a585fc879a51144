#!/usr/bin/env bash
# Checks tests/gpu/run.sh itself against an existing build. Its last line must be
# "GPU: N passed, M failed" and its exit status must agree with it; then:
# - on the CPU stand-in (tests/support/fakegpu first in LD_LIBRARY_PATH, --small
#   sizes): every check must pass, so the script's counting is seen working on
#   programs that really run;
# - without a GPU and without the stand-in: every program must be reported as
#   skipped and counted as failed, never as passed;
# - on a GPU host: every check must pass (a run where the GPU checks fail fails).
# Usage: run_sh_selftest.sh BUILD_DIR [fake|plain]
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
build="$1"
mode="${2:-plain}"
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
if [ "$mode" = fake ]; then
  LD_LIBRARY_PATH="$build/fakegpu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKEGPU_DEVICES=2 \
    "$HERE/run.sh" --no-build --build-dir "$build" --small >"$out" 2>&1
else
  "$HERE/run.sh" --no-build --build-dir "$build" >"$out" 2>&1
fi
rc=$?
last="$(tail -n 1 "$out")"
if ! [[ "$last" =~ ^GPU:\ ([0-9]+)\ passed,\ ([0-9]+)\ failed$ ]]; then
  echo "FAIL: last line is not the summary: '$last'"; cat "$out"; exit 1
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
has_gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  has_gpu=1
fi
programs=9 # collectives, stream, abort, cycles, races, named, bench x2 (each one line), elastic
if [ "$mode" = fake ] || [ "$has_gpu" -eq 1 ]; then
  if [ "$failed" -ne 0 ] || [ "$passed" -lt 50 ]; then
    echo "FAIL: every check must pass here ($mode, GPU: $has_gpu):"; grep '^not ok' "$out"
    exit 1
  fi
else
  skipped="$(grep -c 'skipped, no usable GPU$' "$out" || true)"
  if [ "$skipped" -ne "$programs" ] || [ "$passed" -ne 1 ] || [ "$failed" -ne "$programs" ]; then
    echo "FAIL: without a GPU expected $programs skipped programs, 1 passed (unit tests) and"
    echo "$programs failed:"; cat "$out"; exit 1
  fi
fi
echo "run.sh summary consistent ($mode): $last (exit $rc)"
