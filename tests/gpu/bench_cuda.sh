#!/usr/bin/env bash
# kolo-allreduce-perf -D cuda under kolorun, one rank, on whatever this machine
# is: with a GPU (or the CPU stand-in first in LD_LIBRARY_PATH) it must run a
# checked sweep with every #wrong 0 and exit 0; without one it must exit non-zero
# saying why. Usage: bench_cuda.sh BIN_DIR
set -uo pipefail
bin="$1"
expect="$(cd "$(dirname "${BASH_SOURCE[0]}")/../support" && pwd)/expect.sh"
run=("$bin/kolorun" --timeout 60 -np 1 "$bin/kolo-allreduce-perf" -D cuda -b 4K -e 1M -f 16
     -w 1 -n 2 -c 1)
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then gpu=1; fi
case "${LD_LIBRARY_PATH:-}" in *fakegpu*) gpu=1 ;; esac
if [ "$gpu" -eq 0 ]; then
  exec "$expect" fail "cannot set up CUDA buffers: (no usable GPU device|operation not supported)" \
    "${run[@]}"
fi
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$expect" ok "float32 +sum" "${run[@]}" | tee "$out" || exit 1
rows="$(grep -cE '^\[0\] +[0-9]+ +[0-9]+ +float32 +sum ' "$out" || true)"
wrong="$(grep -E '^\[0\] +[0-9]+ +[0-9]+ +float32 +sum ' "$out" | awk '$NF != 0' | wc -l)"
if [ "$rows" -lt 3 ] || [ "$wrong" -ne 0 ]; then
  echo "bench_cuda.sh: $rows sizes, $wrong with wrong elements"; exit 1
fi
echo "bench_cuda.sh: $rows sizes on the GPU path, none wrong"
