#!/usr/bin/env bash
# The elastic state sync's automatic choice (issue 28): with every rank on its own
# host (faked by its own loopback address, 127.0.0.<rank+1>, as test_allreduce_algos.sh
# does) and KOLO_STATE_SYNC unset, elastic_sync_check's first pass must take the
# sources path (each rank logs "state sync:" at debug level for every sync over it),
# and every rank must still end with rank 0's state and commit bit for bit.
# Needs KOLO_BIN_DIR and KOLO_TEST_DIR (set by CTest).
set -euo pipefail
BIN="${KOLO_BIN_DIR:?KOLO_BIN_DIR not set}"
TESTS="${KOLO_TEST_DIR:?KOLO_TEST_DIR not set}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
set +e
env -u KOLO_STATE_SYNC KOLO_LOG_LEVEL=debug "$BIN/kolorun" --timeout 110 -np 3 -- /bin/sh -c \
  'KOLO_HOST="127.0.0.$((KOLO_RANK + 1))" exec "$0" auto' "$TESTS/elastic_sync_check" \
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
grep -q "PASS: 3 ranks" "$out/stdout" || fail "no passing summary"
# 4 cases of kolo_elastic_sync on the auto pass, 4 of kolo_sync_buffers (forced), on 3 ranks
synced=$(grep -c "state sync: " "$out/stderr" || true)
[ "$synced" -ge 24 ] || fail "$synced sources syncs logged, want 24 (auto took root across hosts?)"
cat "$out/stdout"
echo "PASS: across 3 hosts the sync took the sources path ($synced syncs) and every rank matched"
