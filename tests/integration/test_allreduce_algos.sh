#!/usr/bin/env bash
# One all-reduce algorithm, exact on a host shape: kolorun starts the ranks of
# hosts "a,b,c" (a ranks on the first host, ...), each host faked by its own
# loopback address (127.0.0.<host+1>: kolo reads hosts from the peers'
# addresses, and every 127/8 address is this machine), with KOLO_ALLREDUCE_ALGO
# set; collective_check runs every all-reduce case (every dtype and op, counts
# 0, 1, n-1, n+1, 17, 1031, 65537 and ~1M, in place and not) against its serial
# reference and checks the same bits on every rank. Then every rank must have
# run the algorithm asked for (each logs an algorithm's first use at debug level).
# Usage: test_allreduce_algos.sh ALGO HOSTS [EXPECTED...]: EXPECTED names an algorithm every
# rank must have run (default: ALGO), or -NAME one no rank may have run. Needs KOLO_BIN_DIR
# and KOLO_TEST_DIR (set by CTest).
set -euo pipefail
algo="$1"
hosts="$2"
shift 2
expected=("$@")
[ "${#expected[@]}" -gt 0 ] || expected=("$algo")
BIN="${KOLO_BIN_DIR:?KOLO_BIN_DIR not set}"
TESTS="${KOLO_TEST_DIR:?KOLO_TEST_DIR not set}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
n=0
for count in ${hosts//,/ }; do n=$((n + count)); done

set +e
KOLO_ALLREDUCE_ALGO="$algo" KOLO_LOG_LEVEL=debug KOLO_TEST_HOSTS="$hosts" \
  "$BIN/kolorun" --timeout 200 -np "$n" -- /bin/sh -c '
  host=0; first=0
  for count in $(echo "$KOLO_TEST_HOSTS" | tr , " "); do
    if [ "$KOLO_RANK" -lt $((first + count)) ]; then break; fi
    first=$((first + count)); host=$((host + 1))
  done
  KOLO_HOST="127.0.0.$((host + 1))" exec "$0" allreduce' "$TESTS/collective_check" \
  >"$out/stdout" 2>"$out/stderr"
rc=$?
set -e
fail() {
  echo "FAIL: $*"
  echo "--- stdout"; cat "$out/stdout"
  echo "--- stderr (last 40 lines)"; tail -40 "$out/stderr"
  exit 1
}
[ "$rc" -eq 0 ] || fail "kolorun exited $rc"
grep -q "collective_check: $n ranks, .* 0 failures" "$out/stdout" || fail "no passing summary"
for want in "${expected[@]}"; do
  ran=$(grep -c "first all-reduce by ${want#-} " "$out/stderr" || true)
  if [ "${want:0:1}" = "-" ]; then
    [ "$ran" -eq 0 ] || fail "$ran ranks ran ${want#-}"
  else
    [ "$ran" -eq "$n" ] || fail "$ran of $n ranks ran $want"
  fi
done
cat "$out/stdout"
echo "PASS: $algo on hosts $hosts (${expected[*]} on all $n ranks)"
