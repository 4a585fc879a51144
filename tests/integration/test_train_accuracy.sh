#!/usr/bin/env bash
# Accuracy test: kolo-train with 2 worker processes under kolorun (real TCP
# ring on 127.0.0.1) reaches >= 84% test accuracy on Fashion-MNIST with an MLP,
# in SYNC and in ASYNC mode.
set -uo pipefail
BIN="${KOLO_BIN_DIR:?}"
WORK="$(mktemp -d /tmp/kolo-train-acc-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
failures=0
for mode in sync async; do
  "$BIN/kolorun" -np 2 --timeout 240 "$BIN/kolo-train" --dataset fashion-mnist --model mlp \
    --hidden 128 --epochs 3 --batch 32 --lr 0.02 --mode "$mode" --average-every 8 --json \
    --quiet >"$WORK/out" 2>"$WORK/err"
  rc=$?
  line="$(grep '"event":"done"' "$WORK/out")"
  acc="$(printf '%s' "$line" | sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p')"
  echo "$mode: rc $rc accuracy ${acc:-none}: $line"
  if [ $rc -ne 0 ] || [ -z "$acc" ] || ! python3 -c "import sys; sys.exit(0 if $acc >= 0.84 else 1)"; then
    echo "FAIL: $mode"; cat "$WORK/out" "$WORK/err"; failures=$((failures + 1))
  fi
done
exit $((failures > 0))
