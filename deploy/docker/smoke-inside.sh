#!/bin/bash
# Runs inside the kolo image (deploy/docker/smoke.sh mounts it at /smoke): checks the image
# itself, then completes one small kolo job. The container has its own network namespace,
# so the fixed loopback ports below cannot collide with anything outside it.
# Job (SMOKE_JOB): service (etcd + kolo-server + 2 kolo-workers, a job submitted with kolo
# and watched with curl, then one worker drained as the Helm chart's preStop does and
# stopped with SIGTERM), train (kolo-train alone), allreduce (kolorun + kolo-allreduce-perf),
# or auto: the first of these whose programs are all in the image.
# Exit: 0 passed, 77 no job binary in the image yet (image checks passed), other: failed.
set -uo pipefail

fail() { echo "smoke: FAIL $*"; exit 1; }
step() { echo "smoke: $*"; }
has() { command -v "$1" >/dev/null 2>&1; }

# ---- the image ----------------------------------------------------------------------------
[ "$(id -u)" -ne 0 ] || fail "runs as root"
step "user $(id -un 2>/dev/null || id -u) (uid $(id -u))"
touch /kolo-smoke 2>/dev/null && fail "the root file system is writable (run with --read-only)"
data="${KOLO_DATA_DIR:-/usr/share/datasets/fashion-mnist}"
for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
  [ -r "$data/$f.gz" ] || fail "Fashion-MNIST file $data/$f.gz missing"
done
if has gzip; then
  gzip -t "$data/train-images-idx3-ubyte.gz" "$data/train-labels-idx1-ubyte.gz" || fail "Fashion-MNIST files are corrupt"
fi
step "Fashion-MNIST present in $data"
programs=$(ls /usr/local/bin 2>/dev/null | tr '\n' ' ')
step "programs: ${programs:-none}"
for f in /usr/local/bin/*; do
  [ -e "$f" ] || continue
  if ldd "$f" 2>/dev/null | grep -q 'not found'; then ldd "$f"; fail "$f misses a library"; fi
done

# etcd, as the Helm chart runs it (same image, non-root, data under a writable mount).
mkdir -p /tmp/etcd
etcd --name smoke --data-dir /tmp/etcd/data \
  --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster smoke=http://127.0.0.1:2380 >/tmp/etcd/log 2>&1 &
etcd_pid=$!
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null' EXIT
for _ in $(seq 1 100); do
  curl -sf http://127.0.0.1:2379/health 2>/dev/null | grep -q '"health":"true"' && break
  kill -0 "$etcd_pid" 2>/dev/null || { tail -5 /tmp/etcd/log; fail "etcd exited"; }
  sleep 0.1
done
curl -sf http://127.0.0.1:2379/health | grep -q '"health":"true"' || fail "etcd not healthy within 10 s"
step "etcd $(etcd --version | head -n1 | awk '{print $3}') healthy"
# etcdctl, as the chart's backup and auth jobs run it
export ETCDCTL_API=3 ETCDCTL_ENDPOINTS=http://127.0.0.1:2379
has etcdctl || fail "etcdctl is not in the image (docs/DEPLOY.md and the chart's jobs need it)"
etcdctl put /smoke/key value >/dev/null || fail "etcdctl put failed"
etcdctl snapshot save /tmp/etcd/snapshot.db >/dev/null 2>&1 || fail "etcdctl snapshot save failed"
etcdctl snapshot status /tmp/etcd/snapshot.db >/dev/null || fail "the snapshot is not valid"
date -u +%Y%m%dT%H%M%S.%NZ | grep -Eq '^[0-9]{8}T[0-9]{6}\.[0-9]{9}Z$' || fail "date cannot print nanoseconds (the backup job names snapshots so)"
step "etcdctl $(etcdctl version | head -n1 | awk '{print $3}'): put, snapshot save and status work"

# ---- one job --------------------------------------------------------------------------------
job="${SMOKE_JOB:-auto}"
if [ "$job" = auto ]; then
  if has kolo-server && has kolo-worker && has kolo && has kolo-train; then job=service
  elif has kolo-train; then job=train
  elif has kolorun && has kolo-allreduce-perf; then job=allreduce
  else
    step "SKIP job: no kolo job program (kolo-server + kolo-worker, kolo-train, kolorun) in this image yet"
    exit 77
  fi
fi

case "$job" in
  train)
    step "job: kolo-train --dataset synthetic --steps 20"
    timeout 120 kolo-train --dataset synthetic --steps 20 || fail "kolo-train failed ($?)"
    ;;
  allreduce)
    step "job: kolorun -np 2 kolo-allreduce-perf -b 4K -e 64K"
    timeout 120 kolorun -np 2 kolo-allreduce-perf -b 4K -e 64K || fail "kolorun failed ($?)"
    ;;
  service)
    # The path a cluster takes: coordinator + 2 workers on etcd, a job over gRPC, progress
    # over HTTP. The job spec is /smoke/smoke-job.json.
    for p in kolo-server kolo-worker kolo; do has "$p" || fail "$p is not in the image"; done
    token="smoke-token-0123456789abcdef"
    printf '%s' "$token" >/tmp/token
    kolo-server --etcd http://127.0.0.1:2379 --grpc-listen 127.0.0.1:7070 \
      --http-listen 127.0.0.1:8080 --token-file /tmp/token >/tmp/server.log 2>&1 &
    for _ in $(seq 1 100); do curl -sf http://127.0.0.1:8080/readyz >/dev/null && break; sleep 0.1; done
    curl -sf http://127.0.0.1:8080/readyz >/dev/null || { tail -20 /tmp/server.log; fail "kolo-server not ready within 10 s"; }
    worker_pids=()
    for i in 1 2; do
      mkdir -p "/tmp/w$i"
      kolo-worker --etcd http://127.0.0.1:2379 --advertise "127.0.0.1:710$i" --id "w$i" \
        --lease-ttl 3 --work-dir "/tmp/w$i" --http-listen "127.0.0.1:720$i" >"/tmp/w$i.log" 2>&1 &
      worker_pids+=("$!")
    done
    # the chart's readiness probe: ready = registered in etcd
    for i in 1 2; do
      for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:720$i/readyz" >/dev/null && break; sleep 0.1; done
      curl -sf "http://127.0.0.1:720$i/readyz" | grep -q '"ready":true' || { tail -20 "/tmp/w$i.log"; fail "w$i not ready within 10 s"; }
    done
    step "workers ready (registered in etcd)"
    KOLO_TOKEN="$token" kolo --server 127.0.0.1:7070 submit /smoke/smoke-job.json || fail "kolo submit failed"
    for _ in $(seq 1 120); do
      jobs_json="$(curl -sf -H "Authorization: Bearer $token" http://127.0.0.1:8080/v1/jobs)"
      grep -q '"SUCCEEDED"' <<<"$jobs_json" && break
      grep -q '"FAILED"' <<<"$jobs_json" && { echo "$jobs_json"; tail -20 /tmp/w1.log; fail "the job failed"; }
      sleep 1
    done
    grep -q '"SUCCEEDED"' <<<"$jobs_json" || { echo "$jobs_json"; tail -20 /tmp/server.log; fail "the job did not succeed within 120 s"; }
    step "job succeeded: $jobs_json"
    # A worker leaves as in the Helm chart: its preStop drain call, then SIGTERM.
    export KOLO_TOKEN_FILE=/tmp/token KOLO_SERVER=127.0.0.1:7070 KOLO_WORKER_ID=w2 KOLO_DRAIN_TIMEOUT=5
    KOLO_TOKEN="$(cat "$KOLO_TOKEN_FILE")" kolo --server "$KOLO_SERVER" --timeout "$KOLO_DRAIN_TIMEOUT" \
      ${KOLO_TLS_CA:+--tls-ca "$KOLO_TLS_CA"} drain "$KOLO_WORKER_ID" || fail "the preStop drain call failed"
    workers_json="$(curl -sf -H "Authorization: Bearer $token" http://127.0.0.1:8080/v1/workers)"
    sed 's/},{"id"/}\n{"id"/g' <<<"$workers_json" | grep '"id": *"w2"' | grep -Eq '"draining": *true' ||
      { echo "$workers_json"; fail "w2 is not marked draining"; }
    w2_pid="${worker_pids[1]}"
    kill -TERM "$w2_pid"
    for _ in $(seq 1 200); do kill -0 "$w2_pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$w2_pid" 2>/dev/null && fail "kolo-worker did not exit within 20 s of SIGTERM"
    step "drain + SIGTERM: w2 marked draining, exited"
    ;;
  *) fail "unknown SMOKE_JOB $job" ;;
esac
step "PASS"
