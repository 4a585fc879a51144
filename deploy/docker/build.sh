#!/usr/bin/env bash
# Builds the kolo image without a Docker engine: a Debian bookworm base image made with
# debootstrap (--variant=minbase, from the host's Debian mirror) and imported with podman,
# then deploy/docker/Dockerfile built by `buildah bud --isolation chroot` over a clean copy of
# the source tree (the files git knows, no build directories).
# Usage: deploy/docker/build.sh [image-name]     (default localhost/kolo:dev)
# Env:   KOLO_IMAGE_CACHE  where the base rootfs tarball is kept (default build/.image)
#        KOLO_BASE_IMAGE   use this base image instead of making one
#        BUILD_JOBS        parallel compile jobs inside the build (default 2)
# Needs root and: buildah podman debootstrap runc (apt-get install them).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
image="${1:-localhost/kolo:dev}"
cache="${KOLO_IMAGE_CACHE:-$root/build/.image}"
base_image="${KOLO_BASE_IMAGE:-localhost/kolo-base:bookworm}"
jobs="${BUILD_JOBS:-2}"

log() { echo "build.sh: $*" >&2; }
die() { log "$*"; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap and buildah's chroot isolation)"
for tool in buildah podman; do
  command -v "$tool" >/dev/null || die "$tool is missing: apt-get install buildah podman debootstrap runc"
done

# The host's Debian mirror: the first deb.debian.org-style URI of its apt sources.
debian_mirror() {
  local uri
  uri="$(grep -hE '^(URIs:|deb )' /etc/apt/sources.list /etc/apt/sources.list.d/*.sources \
    /etc/apt/sources.list.d/*.list 2>/dev/null |
    grep -oE 'https?://[^ ]+/debian/?( |$)' | grep -v -- '-security' | head -n1 | tr -d ' ')"
  echo "${uri:-http://deb.debian.org/debian}"
}

# Writes the apt sources of the base image: the host's Debian entries when they are in
# deb822 form (Debian's default), else main, updates and security from the host's mirror.
write_sources() {
  local rootfs="$1" mirror="$2"
  rm -f "$rootfs/etc/apt/sources.list"
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    cp /etc/apt/sources.list.d/debian.sources "$rootfs/etc/apt/sources.list.d/debian.sources"
  else
    cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror bookworm main
deb $mirror bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
EOF
  fi
}

# Makes (once) and imports (when missing) the debootstrapped base image.
ensure_base_image() {
  if [ -n "${KOLO_BASE_IMAGE:-}" ] || podman image exists "$base_image"; then
    log "base image $base_image present"
    return
  fi
  local tarball="$cache/bookworm-minbase.tar"
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null || die "debootstrap is missing: apt-get install debootstrap"
    mkdir -p "$cache"
    local rootfs mirror
    rootfs="$(mktemp -d "$cache/rootfs.XXXXXX")"
    mirror="$(debian_mirror)"
    log "debootstrap --variant=minbase bookworm from $mirror (about a minute)"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
      { tail -20 "$cache/debootstrap.log" >&2; rm -rf "$rootfs"; die "debootstrap failed"; }
    write_sources "$rootfs" "$mirror"
    # apt inside the build must not keep downloaded .debs in the image.
    printf 'APT::Keep-Downloaded-Packages "false";\n' >"$rootfs/etc/apt/apt.conf.d/99kolo-no-cache"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$rootfs"
  fi
  log "importing $tarball as $base_image"
  podman import --quiet "$tarball" "$base_image" >/dev/null
}

# A clean build context: the files git tracks or would track, nothing from build trees.
make_context() {
  local ctx="$1"
  (cd "$root" && git ls-files -z --cached --others --exclude-standard |
    while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
    tar --null -T - -cf -) | tar -C "$ctx" -xf -
}

start=$(date +%s)
ensure_base_image
ctx="$(mktemp -d "${TMPDIR:-/tmp}/kolo-image-context.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
make_context "$ctx"

log "buildah bud -> $image"
# chroot isolation: no container runtime or nested namespaces needed. The ulimits are the
# host's: this sandbox may not raise RLIMIT_NOFILE past them (buildah's default is higher).
buildah bud --isolation chroot --layers \
  --ulimit "nofile=$(ulimit -Sn):$(ulimit -Hn)" \
  --build-arg BASE_IMAGE="$base_image" --build-arg BUILD_JOBS="$jobs" \
  -f "$ctx/deploy/docker/Dockerfile" -t "$image" "$ctx"

size="$(podman image inspect --format '{{.Size}}' "$image")"
log "built $image: $((size / 1024 / 1024)) MiB in $(($(date +%s) - start)) s"
