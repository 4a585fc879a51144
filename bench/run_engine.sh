#!/usr/bin/env bash
# The engine benchmark of issue #13 in one command: ResNet-50's 161 float32
# gradient tensors on 2 ranks (kolorun, one host), rounds of three interleaved
# runs (fused named ops in opposite orders / 161 separate blocking all-reduces /
# one all-reduce of the total = the floor), medians over the rounds, the targets
# checked, and the machine's load printed with the table.
# Usage: bench/run_engine.sh [-r ROUNDS] [-- kolo-engine-bench flags: -w W -n STEPS -s DIVISOR]
#   defaults: 5 rounds, "-w 3 -n 10" (divisor 1 = the real sizes)
# Binaries come from $KOLO_BIN_DIR, else build/bin next to this script.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${KOLO_BIN_DIR:-$ROOT/build/bin}"
rounds=5
while [ $# -gt 0 ]; do
  case "$1" in
    -r) rounds="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "run_engine.sh: unknown argument '$1' (usage: -r ROUNDS -- bench flags)" >&2; exit 2 ;;
  esac
done
args=("$@")
if [ ${#args[@]} -eq 0 ]; then args=(-w 3 -n 10); fi
for binary in kolorun kolo-engine-bench; do
  if [ ! -x "$BIN/$binary" ]; then
    echo "run_engine.sh: $BIN/$binary not found (build first, or set KOLO_BIN_DIR)" >&2
    exit 1
  fi
done
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"
for ((round = 1; round <= rounds; round++)); do
  for mode in fused separate floor; do
    "$BIN/kolorun" --timeout 300 -np 2 "$BIN/kolo-engine-bench" "$mode" "${args[@]}" \
      | sed 's/^\[[0-9]*\] //' >>"$out"
  done
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" "$rounds" "$load_before" "$load_after" <<'PY'
import statistics, sys
path, rounds, before, after = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
runs = {}
nego = []
for line in open(path):
    f = line.split()
    if len(f) < 4 or f[0] != "rank":
        continue
    kv = dict(zip(f[2::2], f[3::2]))
    mode = kv["mode"]
    if f[1] == "0":
        runs.setdefault(mode, []).append(float(kv["step_ms"]))
        size = int(kv["bytes"])
    if mode == "fused":
        nego.append((float(kv["negotiation_us_per_step"]), float(kv["cycles_per_step"]),
                     float(kv["negotiation_bytes_per_step"]), float(kv["batches_per_step"]),
                     float(kv["negotiation_work_us_per_step"])))
med = {m: statistics.median(v) for m, v in runs.items()}
print(f"engine benchmark: 161 ResNet-50 float32 gradients ({size / 1e6:.1f} MB), 2 ranks, "
      f"{rounds} rounds (median of per-run medians); load {before} -> {after}")
print(f"{'mode':<10} {'step ms':>9} {'vs floor':>9} {'spread ms':>16}")
for mode in ("fused", "separate", "floor"):
    v = runs.get(mode, [])
    if v:
        print(f"{mode:<10} {med[mode]:9.2f} {med[mode] / med['floor']:8.2f}x {min(v):7.2f}..{max(v):<7.2f}")
if nego:
    us = statistics.median(n[0] for n in nego)
    cycles = statistics.median(n[1] for n in nego)
    nbytes = statistics.median(n[2] for n in nego)
    batches = statistics.median(n[3] for n in nego)
    work = statistics.median(n[4] for n in nego)
    print(f"fused, per step (incl. the sync op): {cycles:.2f} negotiation cycles, {us:.1f} us in them "
          f"(wall, incl. waiting for the peer), {work:.1f} us of it computing, {nbytes:.0f} bytes sent, "
          f"{batches:.2f} fused all-reduces (median over ranks and runs)")
if "fused" in med and "floor" in med and "separate" in med:
    def verdict(ok):
        return "met" if ok else "NOT met"
    print(f"target fused <= 1.3x floor: {med['fused'] / med['floor']:.2f}x ({verdict(med['fused'] <= 1.3 * med['floor'])})")
    print(f"target fused >= 3x faster than separate: {med['separate'] / med['fused']:.2f}x "
          f"({verdict(med['separate'] >= 3 * med['fused'])})")
if nego:
    print(f"target negotiation < 30 us per step: {work:.1f} us computing ({verdict(work < 30)}), "
          f"{us:.1f} us wall ({verdict(us < 30)})")
PY
