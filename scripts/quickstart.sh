#!/usr/bin/env bash
# The main job on an embedded default, on one machine: installs what is missing,
# builds kolo, starts a private etcd, one kolo-server and two kolo-workers on
# 127.0.0.1, submits a SYNC data-parallel MLP job on Fashion-MNIST, shows its
# progress live (and prints the dashboard's URL: open it in a browser to watch the job),
# and prints the job's final status JSON as curl returns it. Every process it starts is
# stopped on the way out. It fails (exit 1) unless the job succeeds with at least
# --min-accuracy test accuracy.
# --pytorch runs the same training as a PyTorch script instead of the built-in trainer:
# examples/pytorch/elastic_fashion_mnist.py (kolo.torch, Horovod's API) as an `exec` job
# under Debian's /usr/bin/python3, elastic (it survives a lost worker in place).
# --mode M trains in mode M (sync, async, local_sgd or diloco; the job spec's mode with
# its default parameters): the same script, unchanged, e.g. --pytorch --mode diloco.
# Options: --workers N (default 2), --epochs N (default 3), --model mlp|lenet, --pytorch,
#          --mode sync|async|local_sgd|diloco (default sync),
#          --min-accuracy X (default 0.85), --keep (keep the work dir),
#          --keep-up (after the job, keep etcd, kolo-server and the workers running for the
#          dashboard, the CLI and curl until Ctrl-C; the dashboard is on 127.0.0.1:7080 when
#          that port is free),
#          --bin DIR (use built binaries; skip the set-up and the build).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

workers=2
epochs=3
model=mlp
min_accuracy=0.85
keep=0
keep_up=0
pytorch=0
mode=SYNC
BIN=""
usage() {
  echo "usage: scripts/quickstart.sh [--workers N] [--epochs N] [--model mlp|lenet] [--min-accuracy X] [--pytorch] [--mode M] [--keep] [--keep-up] [--bin DIR]" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --workers) workers="${2:?}"; shift 2 ;;
    --epochs) epochs="${2:?}"; shift 2 ;;
    --model) model="${2:?}"; shift 2 ;;
    --min-accuracy) min_accuracy="${2:?}"; shift 2 ;;
    --keep) keep=1; shift ;;
    --keep-up) keep_up=1; shift ;;
    --pytorch) pytorch=1; shift ;;
    --mode) mode="$(printf '%s' "${2:?}" | tr 'a-z-' 'A-Z_')"; shift 2 ;;
    --bin) BIN="${2:?}"; shift 2 ;;
    *) usage ;;
  esac
done
case "$model" in mlp|lenet) ;; *) usage ;; esac
case "$mode" in SYNC|ASYNC|LOCAL_SGD|DILOCO) ;; *) usage ;; esac

if [ -z "$BIN" ]; then
  "$ROOT/scripts/setup.sh"
  echo "== building kolo (build/)"
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j "$(nproc 2>/dev/null || echo 2)" >/dev/null
  BIN="$ROOT/build/bin"
fi

work="$(mktemp -d /tmp/kolo-quickstart-XXXXXX)"
pids=()
cleanup() {
  local rc=$?
  # newest first: workers drain while the server and etcd are still up
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    local pid="${pids[$i]}"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  if [ "$keep" -eq 1 ]; then echo "== logs kept in $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT INT TERM

free_port() { /usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_for() { # wait_for SECONDS COMMAND... : retries COMMAND until it succeeds
  local limit="$1"; shift
  for _ in $(seq $((limit * 10))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "quickstart: timed out waiting for: $*" >&2
  return 1
}

echo "== private etcd on 127.0.0.1"
client_port="$(free_port)"; peer_port="$(free_port)"
etcd_url="http://127.0.0.1:$client_port"
etcd --name quickstart --data-dir "$work/etcd" \
  --listen-client-urls "$etcd_url" --advertise-client-urls "$etcd_url" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "quickstart=http://127.0.0.1:$peer_port" >"$work/etcd.log" 2>&1 &
pids+=($!)
wait_for 30 curl -sf "$etcd_url/health"

echo "== kolo-server"
# a cluster kept up gets the documented ports when they are free; otherwise any free ones
port_free() { /usr/bin/python3 -c 'import socket,sys; s=socket.socket(); s.bind(("127.0.0.1",int(sys.argv[1])))' "$1" 2>/dev/null; }
grpc_listen=127.0.0.1:0 http_listen=127.0.0.1:0
if [ "$keep_up" -eq 1 ] && port_free 7070 && port_free 7080; then grpc_listen=127.0.0.1:7070 http_listen=127.0.0.1:7080; fi
"$BIN/kolo-server" --etcd "$etcd_url" --grpc-listen "$grpc_listen" --http-listen "$http_listen" \
  --port-file "$work/ports" >"$work/server.log" 2>&1 &
pids+=($!)
wait_for 30 test -s "$work/ports"
grpc_port="$(sed -n 's/^grpc_port=//p' "$work/ports")"
http_port="$(sed -n 's/^http_port=//p' "$work/ports")"
export KOLO_SERVER="127.0.0.1:$grpc_port"
api="http://127.0.0.1:$http_port"
wait_for 30 curl -sf "$api/readyz"
echo "== ports (free ones, picked for this run, so two users on one host do not collide):"
echo "   etcd 127.0.0.1:$client_port (peer $peer_port), kolo-server gRPC 127.0.0.1:$grpc_port (KOLO_SERVER), HTTP 127.0.0.1:$http_port"
echo "== dashboard: $api/  (open it in a browser to watch the job)"

# the workers' Python processes import kolo from this checkout (setup.sh also installs a kolo.pth)
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
# and the libkolo of the binaries used (with --bin, maybe not build/)
if [ -z "${KOLO_LIBRARY:-}" ] && [ -e "$BIN/../lib/libkolo.so" ]; then export KOLO_LIBRARY="$(cd "$BIN/../lib" && pwd)/libkolo.so"; fi
echo "== $workers kolo-workers"
for i in $(seq "$workers"); do
  worker_port="$(free_port)"
  echo "   worker-$i: data plane 127.0.0.1:$worker_port"
  "$BIN/kolo-worker" --etcd "$etcd_url" --advertise "127.0.0.1:$worker_port" --id "worker-$i" \
    --work-dir "$work/worker-$i" >"$work/worker-$i.log" 2>&1 &
  pids+=($!)
done
wait_for 30 sh -c "[ \"\$('$BIN/kolo' --json workers | grep -o '\"id\"' | wc -l)\" -ge $workers ]"

if [ "$pytorch" -eq 1 ]; then
  # the example's models: mlp, or its LeNet-like "net"
  if [ "$model" = mlp ]; then torch_model=mlp; else torch_model=net; fi
  echo "== submitting a PyTorch $model job in mode $mode on Fashion-MNIST: examples/pytorch/elastic_fashion_mnist.py as an exec job ($workers workers, $epochs epochs)"
  submit=(--name "fashion-mnist-torch-$model" --workers "$workers:$workers" --mode "$mode" --exec /usr/bin/python3
          "$ROOT/examples/pytorch/elastic_fashion_mnist.py" --model "$torch_model" --epochs "$epochs" --batch-size 32)
else
  if [ "$model" = mlp ]; then model_flags=(--model mlp --hp hidden=128 --lr 0.02); else model_flags=(--model lenet --lr 0.02); fi
  echo "== submitting a $mode $model job on Fashion-MNIST ($workers workers, $epochs epochs)"
  submit=(--name "fashion-mnist-$model" --workers "$workers:$workers" --mode "$mode" "${model_flags[@]}"
          --dataset fashion-mnist --epochs "$epochs" --batch 32 --checkpoint-dir "$work/checkpoints")
fi
job="$("$BIN/kolo" --json submit "${submit[@]}" | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
echo "job $job submitted; progress (GET $api/v1/jobs/$job):"

started=$(date +%s)
phase=""
last=""
while :; do
  status="$(curl -sf "$api/v1/jobs/$job" || true)"
  line="$(printf '%s' "$status" | /usr/bin/python3 -c '
import json, sys
try:
    job = json.load(sys.stdin)
except Exception:
    sys.exit(0)
st = job.get("status") or {}
p = st.get("progress") or {}
parts = ["phase %-13s" % st.get("phase", "?"), "ring epoch %s" % st.get("epoch", 0),
         "workers %d" % len(st.get("members") or [])]
if p:
    total = p.get("total_steps") or 0
    parts.append("step %s" % p.get("step", 0) + ("/%s" % total if total else ""))
    if p.get("loss"): parts.append("loss %.4f" % p["loss"])
    if p.get("accuracy"): parts.append("test accuracy %.2f%%" % (100 * p["accuracy"]))
    if p.get("samples_per_sec"): parts.append("%.0f samples/s" % p["samples_per_sec"])
    if p.get("rounds"): parts.append("%s rounds" % p["rounds"])
print("  ".join(parts))
print(st.get("phase", ""), file=sys.stderr)' 2>"$work/phase")"
  phase="$(cat "$work/phase")"
  if [ -n "$line" ] && [ "$line" != "$last" ]; then
    printf '  [%4ds] %s\n' "$(( $(date +%s) - started ))" "$line"
    last="$line"
  fi
  case "$phase" in SUCCEEDED|FAILED|CANCELLED) break ;; esac
  if [ $(( $(date +%s) - started )) -gt 900 ]; then echo "quickstart: job did not finish in 15 minutes" >&2; exit 1; fi
  sleep 1
done
echo "== final status: curl -s $api/v1/jobs/$job"
curl -s "$api/v1/jobs/$job" | /usr/bin/python3 -m json.tool
accuracy="$(curl -s "$api/v1/jobs/$job" | /usr/bin/python3 -c 'import json,sys; print(((json.load(sys.stdin).get("status") or {}).get("progress") or {}).get("accuracy", 0))')"
echo "== finished in $(( $(date +%s) - started )) s with phase $phase, test accuracy $accuracy"
verdict=0
if [ "$phase" != "SUCCEEDED" ]; then
  echo "quickstart: the job ended $phase" >&2
  verdict=1
elif ! /usr/bin/python3 -c "import sys; sys.exit(0 if float('$accuracy') >= float('$min_accuracy') else 1)"; then
  echo "quickstart: test accuracy $accuracy is below $min_accuracy" >&2
  verdict=1
fi
if [ "$keep_up" -eq 1 ]; then
  echo "== the cluster stays up: dashboard $api/ , job $api/#/jobs/$job"
  echo "   KOLO_SERVER=$KOLO_SERVER $BIN/kolo list   |   curl -s $api/v1/jobs/$job/metrics"
  echo "   Ctrl-C stops etcd, kolo-server and the workers"
  trap 'exit $verdict' INT TERM # the EXIT trap then stops everything
  while :; do sleep 1; done
fi
exit "$verdict"
