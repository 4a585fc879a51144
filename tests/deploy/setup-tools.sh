#!/usr/bin/env bash
# Fetches what the chart tests need into a cache directory, once: helm (get-helm.sh) and
# the pinned npm packages of package-lock.json (kubernetes-models, yaml) for validate.mjs.
# Prints two lines: the helm binary, and the directory whose node_modules holds the packages.
# Usage: setup-tools.sh [tools-dir]   (default as in get-helm.sh)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
tools="${1:-${KOLO_TOOLS_DIR:-${KOLO_BUILD_DIR:-$root/build}/.tools}}"
mkdir -p "$tools"

helm="$("$here/get-helm.sh" "$tools")"

# One directory per lock file content: changing a pinned version installs afresh.
lock_id="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)"
node_dir="$tools/node-$lock_id"
if [ ! -f "$node_dir/.installed" ]; then
  work="$(mktemp -d "$tools/.npm.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  cp "$here/package.json" "$here/package-lock.json" "$work/"
  (cd "$work" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error >/dev/null)
  touch "$work/.installed"
  if ! mv -T "$work" "$node_dir" 2>/dev/null; then
    [ -f "$node_dir/.installed" ] || { echo "setup-tools: could not install into $node_dir" >&2; exit 1; }
  fi
fi

echo "$helm"
echo "$node_dir"
