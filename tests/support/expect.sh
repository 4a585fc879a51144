#!/usr/bin/env bash
# Runs a command and checks both its exit status and its output, which CTest's
# PASS_REGULAR_EXPRESSION alone does not (it ignores the status).
# Usage: expect.sh ok|fail REGEX COMMAND [ARGS...]
#   ok: exit status 0; fail: non-zero (but not a crash by signal); the combined
#   output must match the extended regular expression REGEX.
set -uo pipefail
want="$1"
pattern="$2"
shift 2
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
"$@" >"$out" 2>&1
rc=$?
cat "$out"
if [ "$want" = ok ] && [ "$rc" -ne 0 ]; then
  echo "expect.sh: wanted exit status 0, got $rc"; exit 1
fi
if [ "$want" = fail ] && { [ "$rc" -eq 0 ] || [ "$rc" -gt 128 ]; }; then
  echo "expect.sh: wanted a clean failure (1..128), got $rc"; exit 1
fi
if ! grep -Eq -- "$pattern" "$out"; then
  echo "expect.sh: output does not match /$pattern/"; exit 1
fi
echo "expect.sh: exit $rc and /$pattern/ as wanted"
