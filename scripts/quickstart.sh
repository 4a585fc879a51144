#!/usr/bin/env bash
# The main job on an embedded default, on one machine: installs what is missing,
# builds kolo, and runs a two-rank all-reduce sweep under kolorun (libkolo's ring
# over TCP on 127.0.0.1), printing nccl-tests style figures as it goes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

"$ROOT/scripts/setup.sh"
echo "== building kolo (build/)"
cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
echo "== kolorun -np 2 kolo-allreduce-perf: ring all-reduce of float32 on 127.0.0.1"
exec build/bin/kolorun -np 2 --timeout 600 -- build/bin/kolo-allreduce-perf -b 4K -e 64M -f 4 -w 5 -n 20 -c 1
