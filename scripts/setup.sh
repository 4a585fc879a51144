#!/usr/bin/env bash
# Installs every Debian package kolo needs to build, test and run. Idempotent:
# packages already present are skipped, so a second run does no network I/O.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git ca-certificates curl
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler
  libcurl4-openssl-dev libjansson-dev libmicrohttpd-dev libssl-dev zlib1g-dev
  libcmocka-dev libopenblas-dev
  etcd-server etcd-client
  dataset-fashion-mnist
  python3-grpcio python3-protobuf
  python3-pytest python3-torch python3-numpy
  wrk valgrind iproute2 procps psmisc openssl
  unzip
  clang libclang-rt-14-dev
  buildah podman debootstrap runc
)

missing=()
for package in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

# Node.js and npm (for the Helm chart's offline manifest validation): Debian's
# packages unless a node that ships npm is already installed.
if ! command -v npm >/dev/null 2>&1; then
  missing+=(nodejs npm)
fi

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: done"
