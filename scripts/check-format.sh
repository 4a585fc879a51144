#!/usr/bin/env bash
# Fails when a C source or header tracked by git is not formatted as .clang-format says
# (clang-format 14, Debian's `clang-format`), naming each file and the first lines that
# differ. Fix with: scripts/check-format.sh --fix
# Usage: scripts/check-format.sh [--fix]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
command -v clang-format >/dev/null || { echo "check-format: clang-format is not installed (scripts/setup.sh installs it)" >&2; exit 2; }
files=()
while IFS= read -r f; do files+=("$f"); done < <(git ls-files '*.c' '*.h')
[ "${#files[@]}" -gt 0 ] || { echo "check-format: no C files found (not a git checkout?)" >&2; exit 2; }
if [ "${1:-}" = "--fix" ]; then
  clang-format -i --style=file "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! out=$(clang-format --style=file "$f" | diff -u "$f" - 2>&1); then
    bad=$((bad + 1))
    echo "check-format: $f is not formatted:"
    echo "$out" | sed -n '3,12p'
  fi
done
if [ "$bad" -gt 0 ]; then
  echo "check-format: $bad of ${#files[@]} files differ from .clang-format (scripts/check-format.sh --fix)"
  exit 1
fi
echo "check-format: ${#files[@]} files formatted"
