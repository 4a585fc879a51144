#!/usr/bin/env bash
# Dashboard load benchmark: does the API slow down with N dashboards open? One command, prints
# the table (interleaved rounds with 0 and N dashboards, medians). Not a test.
# Usage: bench/dash/run.sh [BUILD_DIR]   (env: DASHBOARDS=20 ROUNDS=3 SECONDS_RUN=8)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
exec /usr/bin/python3 "$ROOT/bench/dash/dashboards.py" "${1:-$ROOT/build}"
