#!/usr/bin/env bash
# Accuracy test: kolo-train with 2 worker processes under kolorun (real TCP
# ring on 127.0.0.1) reaches >= 85% test accuracy on Fashion-MNIST with an MLP
# in every mode: SYNC, ASYNC (2 rounds of 4 steps outstanding), LOCAL_SGD and DILOCO (the
# latter also with int8 outer gradients), each in 3 epochs. DILOCO's outer
# Nesterov momentum (0.7, 0.9) multiplies the step about 7-fold: it runs longer
# rounds (H = 32) at half the inner learning rate.
set -uo pipefail
BIN="${KOLO_BIN_DIR:?}"
WORK="$(mktemp -d /tmp/kolo-train-acc-XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
failures=0
# ASYNC: 2 rounds of 4 steps outstanding (the fold must take out the corrections folded in after
# its snapshot; without that it reached 25-46%). Rounds of 8 steps with 2 outstanding (16 steps
# of staleness) end at 84.6-85.9% in 3 epochs, too close to the gate for a test.
for mode in "sync" "async --average-every 4 --max-staleness 2" \
  "local_sgd --average-every 8" \
  "diloco --average-every 32 --lr 0.01" "diloco --average-every 32 --lr 0.01 --compression int8"; do
  # shellcheck disable=SC2086 # the mode's flags are words
  "$BIN/kolorun" -np 2 --timeout 240 "$BIN/kolo-train" --dataset fashion-mnist --model mlp \
    --hidden 128 --epochs 3 --batch 32 --lr 0.02 --mode $mode --json --quiet \
    >"$WORK/out" 2>"$WORK/err"
  rc=$?
  line="$(grep '"event":"done"' "$WORK/out")"
  acc="$(printf '%s' "$line" | sed -n 's/.*"accuracy":\([0-9.]*\).*/\1/p')"
  echo "$mode: rc $rc accuracy ${acc:-none}: $line"
  if [ $rc -ne 0 ] || [ -z "$acc" ] || ! python3 -c "import sys; sys.exit(0 if $acc >= 0.85 else 1)"; then
    echo "FAIL: $mode"; cat "$WORK/out" "$WORK/err"; failures=$((failures + 1))
  fi
done
exit $((failures > 0))
