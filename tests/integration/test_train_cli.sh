#!/usr/bin/env bash
# Integration test of the kolo-train program: bad flags and damaged datasets
# fail with a clear message and a non-zero exit; SIGTERM stops a run with a
# checkpoint that a rerun resumes from; a 2-process run under kolorun
# (real processes, real TCP ring on 127.0.0.1) prints JSON progress and a final
# line; checkpoints written by the binary resume, and a corrupted one is skipped.
set -uo pipefail
BIN="${KOLO_BIN_DIR:?}"
TRAIN="$BIN/kolo-train"
KOLORUN="$BIN/kolorun"
WORK="$(mktemp -d /tmp/kolo-train-cli-XXXXXX)"
pid=""
trap '[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null; rm -rf "$WORK"' EXIT
failures=0

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }

# expect_error "what" "stderr pattern" cmd... : non-zero exit and the message on stderr
expect_error() {
  local what="$1" pattern="$2"; shift 2
  if "$@" >"$WORK/out" 2>"$WORK/err"; then
    fail "$what: exit 0"; return
  fi
  if grep -q -- "$pattern" "$WORK/err"; then pass "$what"; else
    fail "$what: stderr lacks '$pattern':"; cat "$WORK/err"; fi
}

expect_error "unknown flag" "unknown or incomplete option" "$TRAIN" --bogus
expect_error "bad model" "want mlp, lenet or logreg" "$TRAIN" --model resnet
expect_error "bad batch" "batch must be" "$TRAIN" --batch 0
expect_error "bad mode" "want sync, async, local_sgd or diloco" "$TRAIN" --mode sometimes
expect_error "setting of another mode" "--outer-lr: only for --mode diloco, not async" \
  "$TRAIN" --mode async --outer-lr 0.5
expect_error "setting without its mode" "--max-staleness: only for --mode async, not sync" \
  "$TRAIN" --max-staleness 2
expect_error "bad outer momentum" "--outer-momentum must be in \[0, 1)" \
  "$TRAIN" --mode diloco --outer-momentum 1.5
# without --mode the job's KOLO_MODE* environment names the mode (kolo_mode_from_env)
expect_error "bad mode in the environment" "KOLO_MODE" env KOLO_MODE=sometimes "$TRAIN"
expect_error "flag of another mode than the environment's" \
  "--outer-lr: only for --mode diloco, not async" env KOLO_MODE=ASYNC "$TRAIN" --outer-lr 0.5
if env KOLO_MODE=DILOCO KOLO_MODE_SYNC_EVERY=4 "$TRAIN" --steps 8 --no-eval --json --quiet \
  >"$WORK/out" 2>&1 && grep -q '"event":"done".*"mode":"diloco"' "$WORK/out"; then
  pass "the environment's mode"
else
  fail "KOLO_MODE=DILOCO did not run diloco:"; cat "$WORK/out"
fi
expect_error "bad lr" "--lr" "$TRAIN" --lr -1
expect_error "bad boolean" "not a boolean" "$TRAIN" --json=maybe
expect_error "logreg with hidden layers" "no hidden layers" "$TRAIN" --model logreg --hidden 12
expect_error "bad hidden sizes" "want up to 8 comma-separated widths" "$TRAIN" --hidden 12,abc
if "$TRAIN" --model=logreg --steps=5 --json=true --quiet=yes --eval=false >"$WORK/out" 2>&1 &&
   grep -q '^{"event":"done","steps":5,' "$WORK/out"; then pass "--key=value flags and logreg"; else
  fail "--key=value flags"; cat "$WORK/out"; fi
expect_error "unknown dataset" "unknown dataset" "$TRAIN" --dataset nosuch
expect_error "missing idx dir" "No such file" "$TRAIN" --dataset "idx:$WORK/none"

# damaged Fashion-MNIST copies: truncated gzip, wrong magic
SRC=/usr/share/datasets/fashion-mnist
mkdir -p "$WORK/trunc" "$WORK/magic"
cp "$SRC"/t10k-* "$WORK/trunc/"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz; do cp "$SRC/$f" "$WORK/trunc/"; done
size=$(stat -c %s "$WORK/trunc/train-images-idx3-ubyte.gz")
truncate -s $((size / 3)) "$WORK/trunc/train-images-idx3-ubyte.gz"
expect_error "truncated gzip" "unexpected end of file\|truncated" "$TRAIN" --dataset "idx:$WORK/trunc"
cp "$SRC"/* "$WORK/magic/"
cp "$SRC/train-labels-idx1-ubyte.gz" "$WORK/magic/train-images-idx3-ubyte.gz"
expect_error "wrong magic" "wrong magic" "$TRAIN" --dataset "idx:$WORK/magic"
printf '0,1,2\n1,oops,3\n' >"$WORK/bad.csv"
expect_error "bad csv" "bad.csv:2" "$TRAIN" --dataset "csv:$WORK/bad.csv"

# a CSV run trains and ends with a final line
python3 - "$WORK/d.csv" <<'PY'
import random, sys
random.seed(3)
with open(sys.argv[1], "w") as f:
    f.write("label,x,y\n")
    for _ in range(600):
        c = random.randrange(2)
        f.write("%d,%.4f,%.4f\n" % (c, random.gauss(2 * c - 1, 0.5), random.gauss(0, 1)))
PY
if "$TRAIN" --dataset "csv:$WORK/d.csv" --hidden 8 --epochs 5 --batch 16 --quiet >"$WORK/out" 2>&1 &&
   grep -q "^final: test accuracy 0\.[89]" "$WORK/out"; then pass "csv training"; else
  fail "csv training"; cat "$WORK/out"; fi

# LIBSVM with a separate test file (sparse, +1/-1 labels)
python3 - "$WORK/train.svm" "$WORK/test.svm" <<'PY'
import random, sys
random.seed(5)
for path, n in ((sys.argv[1], 600), (sys.argv[2], 200)):
    with open(path, "w") as f:
        for _ in range(n):
            c = random.randrange(2)
            f.write("%+d 2:%.4f 5:%.4f\n" % (2 * c - 1, random.gauss(2 * c - 1, 0.5), random.gauss(0, 1)))
PY
if "$TRAIN" --dataset "libsvm:$WORK/train.svm" --test-data "$WORK/test.svm" --hidden 8 --epochs 5 \
     --batch 16 --quiet >"$WORK/out" 2>&1 && grep -q "^final: test accuracy 0\.[89]" "$WORK/out"; then
  pass "libsvm training with a test file"
else
  fail "libsvm training"; cat "$WORK/out"
fi
printf '+1 9:1\n' >"$WORK/wide.svm"
expect_error "libsvm test file wider than training" "beyond the training set" \
  "$TRAIN" --dataset "libsvm:$WORK/train.svm" --test-data "$WORK/wide.svm"

# SIGTERM: the run stops at the next step, writes a checkpoint, exits 143; a rerun resumes there
SIG="$WORK/sig"
"$TRAIN" --dataset synthetic --hidden 32 --epochs 100000 --batch 16 --checkpoint-dir "$SIG" \
  --log-every 20 --json >"$WORK/sig.out" 2>"$WORK/sig.err" &
pid=$!
for _ in $(seq 200); do grep -q '"event":"progress"' "$WORK/sig.out" && break; sleep 0.1; done
kill -TERM "$pid"
rc=124
for _ in $(seq 200); do
  if ! kill -0 "$pid" 2>/dev/null; then wait "$pid"; rc=$?; break; fi
  sleep 0.1
done
[ "$rc" -eq 124 ] && { kill -KILL "$pid"; wait "$pid"; }
pid=""
ckpt="$(ls "$SIG" 2>/dev/null | head -1)"
if [ "$rc" -eq 143 ] && [ -n "$ckpt" ] && grep -q "stopped by signal 15" "$WORK/sig.err"; then
  pass "SIGTERM stops with a checkpoint ($ckpt)"
  step=$((10#$(echo "$ckpt" | sed 's/ckpt-\([0-9]*\)\.kolo/\1/')))
  "$TRAIN" --dataset synthetic --hidden 32 --steps $((step + 5)) --batch 16 --checkpoint-dir "$SIG" \
    --json --quiet >"$WORK/sig2.out" 2>&1
  grep -q "\"resumed_step\":$step," "$WORK/sig2.out" && pass "resumed after SIGTERM at $step" ||
    { fail "resume after SIGTERM"; cat "$WORK/sig2.out"; }
else
  fail "SIGTERM (rc $rc, checkpoint '$ckpt')"; cat "$WORK/sig.err"
fi

# 2 processes under kolorun, JSON lines
if [ -x "$KOLORUN" ]; then
  "$KOLORUN" -np 2 --timeout 120 "$TRAIN" --dataset synthetic --hidden 32 --epochs 2 --batch 32 \
    --json --log-every 20 >"$WORK/out" 2>"$WORK/err"
  rc=$?
  if [ $rc -eq 0 ] && grep -q '^\[0\] {"event":"progress","step":20,' "$WORK/out" &&
     grep -q '^\[0\] {"event":"eval","epoch":1,' "$WORK/out" &&
     grep -q '^\[0\] {"event":"done",.*"workers":2,' "$WORK/out" &&
     ! grep -q '^\[1\] {' "$WORK/out"; then
    pass "2-process JSON run"
  else
    fail "2-process JSON run (rc $rc)"; cat "$WORK/out" "$WORK/err"
  fi
  # checkpoints across process restarts
  CK="$WORK/ckpt"
  run2() { "$KOLORUN" -np 2 --timeout 120 "$TRAIN" --dataset synthetic --hidden 32 --batch 16 \
      --checkpoint-dir "$CK" --checkpoint-every 10 --json --quiet "$@"; }
  run2 --steps 30 >"$WORK/a" 2>"$WORK/err" || fail "checkpointed run"
  ls "$CK"/ckpt-000000000030.kolo >/dev/null 2>&1 && pass "final checkpoint written" ||
    fail "no final checkpoint"
  run2 --steps 50 >"$WORK/b" 2>"$WORK/err"
  grep -q '"resumed_step":30,' "$WORK/b" && grep -q '"steps":50,' "$WORK/b" &&
    pass "resumed at step 30" || { fail "resume"; cat "$WORK/b" "$WORK/err"; }
  # corrupt the newest (50): it is reported and the one at 40 is used
  printf 'XXXX' | dd of="$CK/ckpt-000000000050.kolo" bs=1 seek=100 conv=notrunc 2>/dev/null
  run2 --steps 60 >"$WORK/c" 2>"$WORK/err"
  grep -q '"resumed_step":40,' "$WORK/c" && grep -q "skipping checkpoint.*ckpt-000000000050" "$WORK/err" &&
    pass "corrupted checkpoint skipped" || { fail "corrupted checkpoint"; cat "$WORK/c" "$WORK/err"; }
else
  fail "kolorun not built at $KOLORUN"
fi

[ "$failures" -eq 0 ] && echo "all passed" || echo "$failures failed"
exit $((failures > 0))
