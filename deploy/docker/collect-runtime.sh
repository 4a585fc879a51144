#!/bin/sh
# Collects what the kolo image ships from a build tree: the programs of <build>/bin, kolo's
# shared libraries of <build>/lib, and the names of the Debian packages that hold every other
# library they load (ldd, then dpkg -S), so the runtime stage installs exactly those.
# Usage: collect-runtime.sh <build-dir> <out-dir>   (runs inside the image's build stage)
set -eu
build="$1"
out="$2"
mkdir -p "$out/bin" "$out/lib"

for f in "$build"/bin/*; do
  [ -f "$f" ] && [ -x "$f" ] && cp -a "$f" "$out/bin/"
done
for f in "$build"/lib/*.so*; do
  [ -e "$f" ] && cp -a "$f" "$out/lib/"
done

: >"$out/libraries.txt"
for f in "$out"/bin/* "$out"/lib/*.so*; do
  [ -f "$f" ] || continue
  # "libfoo.so.1 => /lib/x86_64-linux-gnu/libfoo.so.1 (0x...)"; kolo's own are in $out/lib.
  ldd "$f" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' >>"$out/libraries.txt" || true
done

: >"$out/runtime-packages.txt"
sort -u "$out/libraries.txt" | while read -r lib; do
  case "$lib" in "$build"/*|/src/*) continue ;; esac
  real="$(readlink -f "$lib")"
  # With merged /usr, dpkg may know a library under /lib or under /usr/lib: try each name.
  pkg=""
  for name in "$lib" "$real" "/usr$lib" "${lib#/usr}" "/usr$real" "${real#/usr}"; do
    pkg="$(dpkg -S "$name" 2>/dev/null | head -n1 | cut -d: -f1)" && [ -n "$pkg" ] && break
  done
  if [ -z "$pkg" ]; then
    echo "collect-runtime: no Debian package holds $lib" >&2
    exit 1
  fi
  echo "$pkg" >>"$out/runtime-packages.txt"
done
sort -u -o "$out/runtime-packages.txt" "$out/runtime-packages.txt"
echo "collect-runtime: $(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries;" \
  "packages: $(tr '\n' ' ' <"$out/runtime-packages.txt")"
