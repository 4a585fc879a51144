#!/usr/bin/env bash
# The CLI (bin/kolo) carries the client's part of kolo.v1 only (kolo_wire: method table,
# JSON codec, over the gRPC C core), not the server: no HTTP server or etcd client library
# is loaded, and none of the server's, store's, scheduler's or etcd code is in the binary.
# Usage: test_cli_links_no_server.sh BINARY   (exit 0 = clean, 1 = names what it carries)
set -u
binary=${1:?usage: $0 BINARY}
[ -x "$binary" ] || { echo "FAIL: $binary is not a program"; exit 1; }
fail=0
needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
for lib in libmicrohttpd libcurl libopenblas libkolo; do
  if grep -q "^$lib" <<<"$needed"; then echo "FAIL: $binary loads $(grep "^$lib" <<<"$needed")"; fail=1; fi
done
# the server's own functions: service calls, store, HTTP/gRPC servers, leader election,
# the scheduler, etcd and the coordination records
carried=$(nm "$binary" | awk '{print $NF}' | sed 's/\..*//' |
  grep -E '^(kolo_server_(service|store|http|grpc_server|leader|kv|metrics|recorder|logs|ui)|kolo_sched_|kolo_etcd_|kolo_keys_|kolo_member)' | sort -u)
if [ -n "$carried" ]; then echo "FAIL: $binary carries server code: $(echo $carried)"; fail=1; fi
[ "$fail" = 0 ] && echo "OK: $binary carries no server code (loads: $(echo $needed))"
exit $fail
