#!/usr/bin/env bash
# kolorun with libkolo end to end: 3 ranks run a long all-reduce benchmark, rank 1
# is SIGKILLed after 1 s; kolorun must name it, stop the others promptly and exit
# with 128+9. Needs KOLO_BIN_DIR (set by CTest).
set -euo pipefail
BIN="${KOLO_BIN_DIR:?KOLO_BIN_DIR not set}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

start=$(date +%s)
set +e
# the background subshell kills $$, which `exec` has turned into rank 1's benchmark
"$BIN/kolorun" --timeout 60 -np 3 -- /bin/sh -c '
  if [ "$KOLO_RANK" = 1 ]; then (sleep 1; kill -KILL $$) & fi
  exec "$0" -b 16M -e 16M -w 0 -n 100000 -c 0' "$BIN/kolo-allreduce-perf" \
  >"$out/stdout" 2>"$out/stderr"
rc=$?
set -e
took=$(( $(date +%s) - start ))

fail() { echo "FAIL: $*"; echo "--- stderr"; cat "$out/stderr"; exit 1; }
[ "$rc" -eq 137 ] || fail "kolorun exited $rc, want 137"
grep -q '^kolorun: rank 1 killed by signal 9$' "$out/stderr" || fail "no verdict line naming rank 1"
[ "$(grep -c '^kolorun: ' "$out/stderr")" -eq 1 ] || fail "more than one kolorun verdict line"
[ "$took" -lt 20 ] || fail "took ${took} s to stop the surviving ranks"
echo "PASS: rank 1 named, exit 137, ${took} s"
