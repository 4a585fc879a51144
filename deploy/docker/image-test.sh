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
"$here/smoke.sh" "$image"
