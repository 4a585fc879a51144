#!/usr/bin/env bash
# Control-plane benchmark: starts kolo-server (--etcd auto, ports picked by the OS), submits
# jobs and measures gRPC SubmitJob/GetJob (kolo-bench-control) and HTTP GET /v1/jobs/{id}
# with wrk and many connections. Not a test: prints figures for docs/PERFORMANCE.md.
# Usage: bench/control/run.sh [BUILD_DIR] (default build/)
# Environment: CONNECTIONS (wrk, default 128), SECONDS_RUN (default 10), THREADS (default 4).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${1:-$ROOT/build}"
CONNECTIONS="${CONNECTIONS:-128}"
SECONDS_RUN="${SECONDS_RUN:-10}"
THREADS="${THREADS:-4}"
WORK="$(mktemp -d)"
SERVER_PID=""
cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID"
    wait "$SERVER_PID" || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

"$BUILD/bin/kolo-server" --etcd auto --data-dir "$WORK/data" --grpc-listen 127.0.0.1:0 \
  --http-listen 127.0.0.1:0 --port-file "$WORK/ports" --log-level warn >"$WORK/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 300); do [ -s "$WORK/ports" ] && break; sleep 0.1; done
[ -s "$WORK/ports" ] || { echo "kolo-server did not start"; cat "$WORK/server.log"; exit 1; }
# shellcheck disable=SC1091
. "$WORK/ports"
echo "kolo-server pid $SERVER_PID grpc $grpc_port http $http_port; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

echo "== gRPC: SubmitJob + GetJob, one client (latency)"
"$BUILD/bin/kolo-bench-control" --server "127.0.0.1:$grpc_port" --threads 1 --jobs 300 --seconds 2
echo "== gRPC: SubmitJob + GetJob ($THREADS threads)"
"$BUILD/bin/kolo-bench-control" --server "127.0.0.1:$grpc_port" --threads "$THREADS" --jobs 250 \
  --seconds "$SECONDS_RUN"

ids=$(curl -s "http://127.0.0.1:$http_port/v1/jobs?page_size=100" | /usr/bin/python3 -c \
  'import json,sys; print(",".join(j["id"] for j in json.load(sys.stdin)["jobs"]))')
echo "== HTTP: GET /v1/jobs/{id}, wrk $CONNECTIONS connections, 2 threads, ${SECONDS_RUN}s"
KOLO_BENCH_IDS="$ids" wrk -t2 -c"$CONNECTIONS" -d"${SECONDS_RUN}s" --latency \
  -s "$ROOT/bench/control/get_job.lua" "http://127.0.0.1:$http_port"
