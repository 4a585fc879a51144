#!/usr/bin/env bash
# CTest entry of the image test (label "image"): builds the image with build.sh and runs
# smoke.sh against it. Slow (minutes) and needs root, buildah, podman, debootstrap and
# runc, so it runs only when KOLO_TEST_IMAGE=1; otherwise it reports "skipped" (exit 77).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [ "${KOLO_TEST_IMAGE:-0}" != 1 ]; then
  echo "image test skipped: set KOLO_TEST_IMAGE=1 to build and smoke-test the image"
  exit 77
fi
# A fixed tag: the next run reuses its cached layers (buildah --layers).
image="localhost/kolo:test"
"$here/build.sh" "$image"
# The image holds every program, so the smoke test runs the service job (never a smaller
# one), and its "no job program" answer (77) is a failure here, not a skip.
rc=0
SMOKE_JOB="${SMOKE_JOB:-service}" "$here/smoke.sh" "$image" || rc=$?
if [ "$rc" -eq 77 ]; then
  echo "image test: FAIL the image has no job program to smoke-test"
  exit 1
fi
exit "$rc"
