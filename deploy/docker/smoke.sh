#!/usr/bin/env bash
# Smoke test of a built kolo image: runs it with podman the way the Helm chart does (its own
# non-root user, read-only root file system, a writable /tmp, no network but loopback) and
# completes one small job inside it (smoke-inside.sh; SMOKE_JOB picks which).
# Usage: deploy/docker/smoke.sh [image]   (default localhost/kolo:dev)
# Exit: 0 passed, 77 the image has no job binary yet, other: failed.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image="${1:-localhost/kolo:dev}"
name="kolo-smoke-$$"
trap 'podman rm -f "$name" >/dev/null 2>&1 || true' EXIT

podman image exists "$image" || { echo "smoke.sh: no image $image (run deploy/docker/build.sh)" >&2; exit 1; }
start=$(date +%s)
set +e
# The ulimits are the host's: podman's default RLIMIT_NOFILE is more than this sandbox allows.
timeout 300 podman run --rm --name "$name" --network none --read-only \
  --tmpfs /tmp:rw,size=512m,mode=1777 \
  --ulimit "nofile=$(ulimit -Sn):$(ulimit -Hn)" --ulimit nproc=32768:32768 \
  -v "$here:/smoke:ro" -e SMOKE_JOB="${SMOKE_JOB:-auto}" \
  "$image" bash /smoke/smoke-inside.sh
rc=$?
set -e
echo "smoke.sh: exit $rc after $(($(date +%s) - start)) s"
exit "$rc"
