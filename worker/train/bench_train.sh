#!/usr/bin/env bash
# Training-throughput benchmark of kolo-train: samples/s for 1 worker and for 2
# workers (kolorun, TCP ring on 127.0.0.1) in SYNC, ASYNC, LOCAL_SGD and DILOCO mode, and the
# scaling efficiency = 2-worker total / (2 x 1-worker). Each figure is the
# median of REPEAT runs. Usage:
#   worker/train/bench_train.sh [--build DIR] [--models "mlp lenet"] [--steps N]
#                               [--batch B] [--repeat R] [--dataset D]
# Prints a table; also one JSON line per configuration with --json.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="$ROOT/build"
MODELS="mlp lenet"
STEPS=300
BATCH=64
REPEAT=3
DATASET=fashion-mnist
AVERAGE_EVERY=8
JSON=0
while [ $# -gt 0 ]; do
  case "$1" in
    --build) BUILD="$2"; shift 2 ;;
    --models) MODELS="$2"; shift 2 ;;
    --steps) STEPS="$2"; shift 2 ;;
    --batch) BATCH="$2"; shift 2 ;;
    --repeat) REPEAT="$2"; shift 2 ;;
    --dataset) DATASET="$2"; shift 2 ;;
    --average-every) AVERAGE_EVERY="$2"; shift 2 ;;
    --json) JSON=1; shift ;;
    *) echo "bench_train: unknown option $1" >&2; exit 2 ;;
  esac
done
TRAIN="$BUILD/bin/kolo-train"
KOLORUN="$BUILD/bin/kolorun"
for b in "$TRAIN" "$KOLORUN"; do
  [ -x "$b" ] || { echo "bench_train: $b not built" >&2; exit 1; }
done
OUT="$(mktemp /tmp/kolo-bench-train-XXXXXX)"
trap 'rm -f "$OUT"' EXIT

# run_one NP MODE MODEL -> samples/s in total (from the JSON "done" line)
run_one() {
  local np="$1" mode="$2" model="$3"
  local args=(--dataset "$DATASET" --model "$model" --hidden 256,128 --steps "$STEPS"
              --batch "$BATCH" --mode "$mode" --no-eval --json --quiet)
  # --average-every is for the modes that average models, not SYNC
  [ "$mode" = sync ] || args+=(--average-every "$AVERAGE_EVERY")
  if [ "$np" -eq 1 ]; then
    "$TRAIN" "${args[@]}" >"$OUT"
  else
    "$KOLORUN" -np "$np" --timeout 600 "$TRAIN" "${args[@]}" >"$OUT"
  fi
  sed -n 's/.*"event":"done".*"samples_per_sec_total":\([0-9.]*\).*/\1/p' "$OUT"
}

# median of REPEAT runs
median_of() {
  local values=()
  for _ in $(seq "$REPEAT"); do values+=("$(run_one "$@")"); done
  printf '%s\n' "${values[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

printf '%-6s %-9s %12s %12s %12s %10s\n' model mode "1w samples/s" "2w total" "2w/worker" efficiency
for model in $MODELS; do
  one="$(median_of 1 sync "$model")"
  for mode in sync async local_sgd diloco; do
    two="$(median_of 2 "$mode" "$model")"
    eff="$(awk -v a="$one" -v b="$two" 'BEGIN { printf "%.1f", 100 * b / (2 * a) }')"
    per="$(awk -v b="$two" 'BEGIN { printf "%.0f", b / 2 }')"
    printf '%-6s %-9s %12.0f %12.0f %12s %9s%%\n' "$model" "$mode" "$one" "$two" "$per" "$eff"
    if [ "$JSON" -eq 1 ]; then
      printf '{"model":"%s","mode":"%s","batch":%s,"steps":%s,"one_worker":%s,"two_workers":%s,"efficiency_pct":%s}\n' \
        "$model" "$mode" "$BATCH" "$STEPS" "$one" "$two" "$eff"
    fi
  done
done
