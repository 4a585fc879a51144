#!/bin/sh
# kolo.Runner in one command: a private kolo cluster on 127.0.0.1 (kolo-server with its
# own etcd child, two kolo-workers) and examples/runner/fashion_mnist.py trained on it
# through kolo.Runner(np=2); everything is stopped at the end.
#   examples/runner/run.sh [--bin DIR] [-- extra fashion_mnist.py flags]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../../build/bin"
if [ "${1:-}" = "--bin" ]; then bin=$2; shift 2; fi
[ "${1:-}" = "--" ] && shift
work=$(mktemp -d /tmp/kolo-runner-demo-XXXXXX)
pids=""
cleanup() {
  for p in $pids; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
# the workers' Python processes import kolo from this checkout (setup.sh also installs a kolo.pth)
export PYTHONPATH="$here/../../python${PYTHONPATH:+:$PYTHONPATH}"
"$bin/kolo-server" --etcd auto --data-dir "$work/etcd" --grpc-listen 127.0.0.1:0 --http-listen off \
  --port-file "$work/ports" >"$work/server.log" 2>&1 &
pids="$!"
i=0
until [ -s "$work/ports" ]; do
  i=$((i + 1)); [ $i -gt 300 ] && { cat "$work/server.log"; echo "kolo-server did not start" >&2; exit 1; }
  sleep 0.1
done
grpc=$(sed -n 's/^grpc_port=//p' "$work/ports")
etcd=$(sed -n 's/.* etcd=\([^ ]*\) .*/\1/p' "$work/server.log" | head -1)
for w in 1 2; do
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  "$bin/kolo-worker" --etcd "$etcd" --advertise "127.0.0.1:$port" --id "demo-w$w" --work-dir "$work/w$w" \
    --lease-ttl 3 >"$work/w$w.log" 2>&1 &
  pids="$pids $!"
done
echo "kolo cluster: kolo-server 127.0.0.1:$grpc (etcd $etcd), workers demo-w1 demo-w2"
/usr/bin/python3 "$here/fashion_mnist.py" --server "127.0.0.1:$grpc" --np 2 "$@"
