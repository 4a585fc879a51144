#!/usr/bin/env bash
# The negotiation cost per steady-state step for ResNet-50's 161 names on 2
# ranks (issue #13's "under 30 us"), measured so that a loaded machine cannot
# inflate it: instructions counted by valgrind's callgrind, converted to time at
# this CPU's instructions per second measured on the same code.
#   1. kolo-nego-bench natively: the negotiation's computation alone (both ranks'
#      tables in one process, no threads or sockets), ns per rank per cycle, the
#      fastest of several rounds (the least disturbed one on a shared machine);
#   2. the same under callgrind at two cycle counts: the difference gives the
#      instructions per rank per cycle, and with (1) instructions per second;
#   3. the real engine: kolo-engine-bench fused (2 ranks, kolorun; tensor sizes
#      divided by DIVISOR so the data plane stays cheap under valgrind) under
#      callgrind collecting only inside the negotiator's run_cycle (encode, send,
#      receive, decode, apply, hand over to the executor), at two step counts:
#      the difference gives the instructions per step on each rank;
#   4. (3) natively, for the wall-clock figures next to the converted ones.
# Usage: bench/run_negotiation.sh [-s DIVISOR] [-n STEPS]   (defaults 1000, 20)
# Binaries come from $KOLO_BIN_DIR, else build/bin next to this script.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${KOLO_BIN_DIR:-$ROOT/build/bin}"
divisor=1000
steps=20
while [ $# -gt 0 ]; do
  case "$1" in
    -s) divisor="$2"; shift 2 ;;
    -n) steps="$2"; shift 2 ;;
    *) echo "run_negotiation.sh: unknown argument '$1' (usage: -s DIVISOR -n STEPS)" >&2; exit 2 ;;
  esac
done
for binary in kolorun kolo-engine-bench kolo-nego-bench; do
  if [ ! -x "$BIN/$binary" ]; then
    echo "run_negotiation.sh: $BIN/$binary not found (build first, or set KOLO_BIN_DIR)" >&2
    exit 1
  fi
done
if ! command -v valgrind >/dev/null; then
  echo "run_negotiation.sh: valgrind not found (apt-get install valgrind)" >&2
  exit 1
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

# callgrind's total of a finished run: the "summary:" (or "totals:") line
ir_of() { awk '/^(summary|totals):/ {print $2; exit}' "$1"; }

"$BIN/kolo-nego-bench" -n 200 -r 300 >"$work/native.txt"
for n in 100 300; do
  valgrind --tool=callgrind --callgrind-out-file="$work/pure.$n" \
    "$BIN/kolo-nego-bench" -n "$n" -r 1 >/dev/null 2>"$work/pure.$n.log"
done
pure_ir=$(( ($(ir_of "$work/pure.300") - $(ir_of "$work/pure.100")) / (200 * 2) ))

short=$((steps / 2))
for n in "$short" "$steps"; do
  mkdir -p "$work/live.$n"
  KOLO_TIMEOUT=120 "$BIN/kolorun" --timeout 600 -np 2 \
    valgrind --tool=callgrind "--toggle-collect=run_cycle*" \
    --callgrind-out-file="$work/live.$n/out.%p" \
    "$BIN/kolo-engine-bench" fused -w 2 -n "$n" -s "$divisor" 2>"$work/live.$n/log" \
    | sed 's/^\[[0-9]*\] //' >"$work/live.$n/bench.txt"
done
"$BIN/kolorun" --timeout 300 -np 2 "$BIN/kolo-engine-bench" fused -w 3 -n 50 -s "$divisor" \
  | sed 's/^\[[0-9]*\] //' >"$work/wall.txt"
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

/usr/bin/python3 - "$work" "$short" "$steps" "$pure_ir" "$divisor" "$load_before" "$load_after" <<'PY'
import glob, os, statistics, sys
work, short, steps, pure_ir, divisor, before, after = sys.argv[1:8]
short, steps, pure_ir = int(short), int(steps), int(pure_ir)

def fields(path):
    out = []
    for line in open(path):
        f = line.split()
        if len(f) >= 4 and f[0] in ("rank", "nego_bench"):
            out.append(dict(zip(f[1::2], f[2::2])) if f[0] == "nego_bench" else
                       dict(zip(f[2::2], f[3::2]), rank=f[1]))
    return out

def ir(path):
    for line in open(path):
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise SystemExit(f"run_negotiation.sh: no instruction total in {path}")

native = fields(os.path.join(work, "native.txt"))[0]
ns_min = float(native["ns_per_rank_cycle_min"])
ns_median = float(native["ns_per_rank_cycle_median"])
ips = pure_ir / ns_min * 1e9  # instructions per second on this code, least disturbed round

def live(n):
    files = sorted(glob.glob(os.path.join(work, f"live.{n}", "out.*")))
    if len(files) != 2:
        raise SystemExit(f"run_negotiation.sh: {len(files)} callgrind files for {n} steps")
    rows = fields(os.path.join(work, f"live.{n}", "bench.txt"))
    return [ir(f) for f in files], rows

irs_short, _ = live(short)
irs_long, rows = live(steps)
per_step = [(b - a) / (steps - short) for a, b in zip(sorted(irs_short), sorted(irs_long))]
cycles = statistics.median(float(r["cycles_per_step"]) for r in rows)
wall = fields(os.path.join(work, "wall.txt"))
work_us = statistics.median(float(r["negotiation_work_us_per_step"]) for r in wall)
wall_us = statistics.median(float(r["negotiation_us_per_step"]) for r in wall)
wall_cycles = statistics.median(float(r["cycles_per_step"]) for r in wall)
step_ir = statistics.median(per_step)
us = step_ir / ips * 1e6
print(f"negotiation cost, 161 ResNet-50 names, 2 ranks, steady state; load {before} -> {after}")
print(f"this CPU on the negotiation code: {pure_ir} instructions per rank per cycle (callgrind), "
      f"{ns_min / 1e3:.2f} us fastest round ({ns_median / 1e3:.2f} us median) -> "
      f"{ips / 1e9:.2f} G instructions/s")
print(f"engine (run_cycle, sizes / {divisor}): {step_ir:.0f} instructions per step per rank "
      f"(ranks: {', '.join(f'{p:.0f}' for p in per_step)}; {cycles:.2f} cycles per step under "
      f"valgrind, the bench's sync op included) = {us:.1f} us per step at {ips / 1e9:.2f} G/s")
print(f"wall clock, same bench natively: {work_us:.1f} us computing per step, {wall_us:.1f} us in "
      f"cycles incl. waiting for the peer, {wall_cycles:.2f} cycles per step")
print(f"target negotiation < 30 us per step: {us:.1f} us from instructions "
      f"({'met' if us < 30 else 'NOT met'}), {work_us:.1f} us wall computing "
      f"({'met' if work_us < 30 else 'NOT met'})")
PY
