#!/usr/bin/env bash
# Installs every Debian package kolo needs to build, test and run. Idempotent:
# packages already present are skipped, so a second run does no network I/O.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config git ca-certificates curl
  libgrpc-dev protobuf-c-compiler libprotobuf-c-dev protobuf-compiler
  libcurl4-openssl-dev libgnutls28-dev libjansson-dev libmicrohttpd-dev libssl-dev zlib1g-dev
  libcmocka-dev libopenblas-dev
  etcd-server etcd-client
  dataset-fashion-mnist
  python3-grpcio python3-protobuf
  python3-torch python3-torchvision python3-numpy python3-pytest python3-cloudpickle
  python3-pip python3-setuptools python3-wheel flake8 black
  libtorch-dev pybind11-dev
  wrk valgrind iproute2 procps psmisc openssl iptables util-linux
  openmpi-bin libopenmpi-dev
  unzip
  clang clang-format libclang-rt-14-dev
  chromium chromium-driver
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

# `import kolo` / `import kolo.torch` for Debian's /usr/bin/python3: a .pth file in
# its site directory naming this checkout's python/ folder (no pip, no
# virtualenv); the package finds libkolo in this checkout's build/ folder.
link_python_package() {
  local root site
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  [ -x /usr/bin/python3 ] || return 0
  site="$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("purelib", "posix_local"))' 2>/dev/null)" || return 0
  [ -n "$site" ] || return 0
  if [ "$(cat "$site/kolo.pth" 2>/dev/null)" != "$root/python" ]; then
    $SUDO mkdir -p "$site" && echo "$root/python" | $SUDO tee "$site/kolo.pth" >/dev/null &&
      echo "setup: /usr/bin/python3 imports kolo from $root/python ($site/kolo.pth)"
  fi
}

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

if [ "${#missing[@]}" -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  link_python_package
  exit 0
fi

echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
$SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"
link_python_package
echo "setup: done"
