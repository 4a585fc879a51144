#!/usr/bin/env bash
# Runs kolo-allreduce-perf several times under kolorun and prints, per size, the
# median time over the runs with the algbw/busbw that time gives, plus the spread.
# Usage: bench/run_allreduce.sh [-r RUNS] [-np N] [-- perf args...]
#   defaults: 5 runs, 2 ranks, perf args "-b 4K -e 64M -f 4 -w 5 -n 20"
# Binaries come from $KOLO_BIN_DIR, else build/bin next to this script.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BIN="${KOLO_BIN_DIR:-$ROOT/build/bin}"
runs=5
np=2
while [ $# -gt 0 ]; do
  case "$1" in
    -r) runs="$2"; shift 2 ;;
    -np) np="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "run_allreduce.sh: unknown argument '$1' (usage: -r RUNS -np N -- perf args)" >&2; exit 2 ;;
  esac
done
perf_args=("$@")
if [ ${#perf_args[@]} -eq 0 ]; then perf_args=(-b 4K -e 64M -f 4 -w 5 -n 20); fi
for binary in kolorun kolo-allreduce-perf; do
  if [ ! -x "$BIN/$binary" ]; then
    echo "run_allreduce.sh: $BIN/$binary not found (build first, or set KOLO_BIN_DIR)" >&2
    exit 1
  fi
done

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for ((run = 1; run <= runs; run++)); do
  "$BIN/kolorun" --timeout 600 -np "$np" -- "$BIN/kolo-allreduce-perf" "${perf_args[@]}" \
    > "$out/run$run.txt"
  echo "run $run/$runs done" >&2
done
head -n 2 "$out/run1.txt" | sed 's/^\[0\] //'
/usr/bin/python3 - "$np" "$out"/run*.txt <<'PY'
import statistics, sys
ranks = int(sys.argv[1])
rows = {}
for path in sys.argv[2:]:
    for line in open(path):
        line = line.split("] ", 1)[1] if line.startswith("[") else line
        fields = line.split()
        if len(fields) != 8 or line.startswith("#"):
            continue
        size, count, dtype, op, time_us = int(fields[0]), fields[1], fields[2], fields[3], float(fields[4])
        entry = rows.setdefault(size, {"count": count, "type": dtype, "op": op, "times": [], "wrong": []})
        entry["times"].append(time_us)
        entry["wrong"].append(fields[7])
factor = 2.0 * (ranks - 1) / ranks
print("# median over %d runs of %d ranks" % (len(sys.argv) - 2, ranks))
print("#%11s %12s %9s %6s %10s %8s %8s %16s %7s" % ("size", "count", "type", "redop", "time", "algbw", "busbw", "busbw min..max", "#wrong"))
print("#%11s %12s %9s %6s %10s %8s %8s %16s %7s" % ("(B)", "(elements)", "", "", "(us)", "(GB/s)", "(GB/s)", "(GB/s)", ""))
for size in sorted(rows):
    e = rows[size]
    t = statistics.median(e["times"])
    algbw = size / t / 1e3
    buses = sorted(size / x / 1e3 * factor for x in e["times"])
    wrong = "0" if all(w in ("0", "N/A") for w in e["wrong"]) else ",".join(e["wrong"])
    print(" %11d %12s %9s %6s %10.1f %8.2f %8.2f %7.2f..%-7.2f %7s" % (size, e["count"], e["type"], e["op"], t, algbw, algbw * factor, buses[0], buses[-1], wrong))
PY
