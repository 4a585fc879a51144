#!/bin/sh
# kolo-worker refuses bad flags with a clear message and a non-zero exit, before
# it touches etcd (the etcd URL below is never contacted).
set -u
bin="$KOLO_BIN_DIR/kolo-worker"
fail=0

expect() { # expect <exit code> <text in stderr> -- args...
  want_code=$1 want_text=$2
  shift 3
  out=$("$bin" "$@" 2>&1)
  code=$?
  if [ "$code" -ne "$want_code" ] || ! printf '%s' "$out" | grep -q -- "$want_text"; then
    echo "FAIL: kolo-worker $* -> exit $code (want $want_code), output: $out"
    fail=1
  else
    echo "ok: kolo-worker $* -> $want_text"
  fi
}

expect 2 "--etcd is required" -- --advertise 127.0.0.1:1
expect 2 "--advertise is required" -- --etcd http://127.0.0.1:9
expect 2 "--etcd: '127.0.0.1:9' is not an http://, https:// or unix:/// URL" -- --etcd 127.0.0.1:9 --advertise 127.0.0.1:1
expect 2 "--lease-ttl: want 1..3600" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 --lease-ttl 0
expect 2 "--warm-join-ms: want 0..600000" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 --warm-join-ms -1
expect 2 "--gpus: want 0..65535" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 --gpus x
expect 2 "unexpected argument" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 extra
expect 1 "is not host:port" -- --etcd http://127.0.0.1:9 --advertise nope
expect 1 "not a valid key segment" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 --id "a/b"
expect 1 "is not key=value" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 --labels zone
expect 2 "--log-file-size: want a size" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 --log-file-size 12Q
expect 2 "--log-job-size must be at least twice" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 --log-file-size 8M --log-job-size 10M
expect 2 "--log-retention: want" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 --log-retention -5
expect 1 "is not host:port of an IPv4 address" -- --etcd http://127.0.0.1:9 --advertise 127.0.0.1:1 --logs-listen nope --work-dir /tmp/kolo-flags-$$
rm -rf /tmp/kolo-flags-$$
expect 0 "usage: kolo-worker" -- --help
exit $fail
