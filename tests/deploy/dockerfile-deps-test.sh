#!/usr/bin/env bash
# Checks that deploy/docker/Dockerfile stays in step with scripts/setup.sh: its build stage
# installs every build package setup.sh lists (compilers, -dev libraries, cmake, pkg-config;
# not the fuzzing tests' clang runtime) and nothing setup.sh does not know; its runtime stage
# carries etcd, etcdctl (the chart's backup and auth jobs run it) and Fashion-MNIST and runs
# as a non-root user.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
dockerfile="${1:-$root/deploy/docker/Dockerfile}"
setup="${2:-$root/scripts/setup.sh}"
status=0
fail() { echo "FAIL $*"; status=1; }

# The words of setup.sh's PACKAGES=( ... ) array.
setup_pkgs="$(sed -n '/^PACKAGES=(/,/^)/p' "$setup" | sed 's/#.*//; s/PACKAGES=(//; s/)//' | tr -s ' \t' '\n' | grep -v '^$' | sort -u)"
[ -n "$setup_pkgs" ] || fail "no PACKAGES list found in $setup"
# Test-only toolchains (clang's sanitizer runtime for the fuzzers, Open MPI as the benchmark
# peer) build nothing the image ships; nor do libtorch-dev and pybind11-dev, which build the
# optional torch.distributed backend (c10d/, KOLO_WITH_TORCH=AUTO): the image has no torch.
test_only='^(libclang-rt-[0-9]+-dev|libopenmpi-dev|libtorch-dev|pybind11-dev)$'
build_needed="$(grep -E -- '-dev$|compiler$|^(build-essential|cmake|pkg-config|git|ca-certificates)$' <<<"$setup_pkgs" |
  grep -Ev -- "$test_only" || true)"

# Package names of the apt-get install in one stage of the Dockerfile (stage 1 or 2).
stage_pkgs() {
  awk -v want="$1" '/^FROM /{stage++} stage==want' "$dockerfile" |
    sed -n '/apt-get install/,/&& rm -rf/p' | sed 's/#.*//' | tr -s ' \t\\' '\n' |
    grep -E '^[a-z0-9][a-z0-9.+-]+$' | grep -vxE 'apt-get|install|rm|rf|&&' | sort -u
}
build_pkgs="$(stage_pkgs 1)"
runtime_pkgs="$(stage_pkgs 2)"
[ -n "$build_pkgs" ] || fail "no apt-get install found in the build stage"

for p in $build_needed; do
  grep -qx -- "$p" <<<"$build_pkgs" || fail "setup.sh's build package $p is missing from the Dockerfile build stage"
done
for p in $build_pkgs; do
  grep -qx -- "$p" <<<"$setup_pkgs" || fail "the Dockerfile build stage installs $p, which scripts/setup.sh does not list"
done
for p in etcd-server etcd-client dataset-fashion-mnist; do
  grep -qx -- "$p" <<<"$runtime_pkgs" || fail "the runtime stage lacks $p"
done
user="$(awk '/^FROM /{stage++} stage==2 && /^USER /{print $2}' "$dockerfile" | tail -n1)"
case "$user" in
  ""|root|0|0:*) fail "the image runs as root (USER '$user')" ;;
esac
[ "$status" -eq 0 ] && echo "PASS: $(wc -w <<<"$build_pkgs") build packages match setup.sh; runtime user $user"
exit "$status"
