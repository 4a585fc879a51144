#!/usr/bin/env bash
# Hosts on one machine: a set of Linux network namespaces joined by a bridge, each
# with its own address, hostname and /dev/shm, for tests and benchmarks that must
# cross a real network stack (kolo's planner groups by host, shared memory only
# works within a host, partitions close nothing).
#
# A set is named kolo<owner-pid>: a hub namespace holding the bridge, and hosts
# h0..h<n-1>, each a namespace kolo<pid>h<i> with a veth to the bridge and the
# address 10.77.0.<i+1>/24 (no default route: nothing leaves the set; the machine's
# own namespace is not touched). Each host has an anchor process that owns the
# host's UTS (hostname kolo-h<i>) and mount namespaces (a private tmpfs on
# /dev/shm); `exec` enters all three, so processes of one host share /dev/shm and
# a hostname, and processes of different hosts share neither. The anchor exits
# when the owner process dies, and `clean-stale` (run by every `up`) removes sets
# whose owner is gone, so a killed test leaves nothing behind for long.
#
#   netns.sh up OWNER_PID N [RATE]   create the set (RATE: tc rate per link each
#                                    way, e.g. 1gbit; none if absent); prints one
#                                    line per host "h<i> <address>"
#   netns.sh exec OWNER_PID I CMD... run CMD in host I (execs it: same pid)
#   netns.sh partition OWNER_PID I MODE [PEER_ADDR]
#                                    drop host I's traffic: MODE in | out | both,
#                                    all traffic or only to/from PEER_ADDR
#   netns.sh heal OWNER_PID I        remove host I's drops
#   netns.sh rate OWNER_PID I RATE   set (or with RATE=none clear) host I's link rate
#   netns.sh down OWNER_PID          remove the set
#   netns.sh clean-stale             remove every set whose owner process is gone
# Exit 77 (skip) when namespaces cannot be made here (not root, no ip netns).
set -euo pipefail

STATE_ROOT=/run/kolo-netns
SUBNET=10.77.0

die() { echo "netns: $*" >&2; exit 1; }
skip() { echo "netns: SKIP $*" >&2; exit 77; }

set_name() { echo "kolo$1"; }
host_ns() { echo "kolo$1h$2"; }

can_make_namespaces() {
  [ "$(id -u)" -eq 0 ] || skip "not root: network namespaces need CAP_SYS_ADMIN"
  command -v ip >/dev/null || skip "no ip (iproute2)"
  command -v nsenter >/dev/null && command -v unshare >/dev/null || skip "no nsenter/unshare (util-linux)"
  ip netns add "kolo-probe-$$" 2>/dev/null || skip "ip netns add is refused here"
  ip netns del "kolo-probe-$$"
}

anchor_pid() { cat "$STATE_ROOT/$(set_name "$1")/h$2.anchor"; }

remove_set() {
  local owner=$1 dir="$STATE_ROOT/$(set_name "$1")" f ns pid
  if [ -d "$dir" ]; then
    for f in "$dir"/h*.anchor; do
      [ -e "$f" ] || continue
      kill -KILL "$(cat "$f")" 2>/dev/null || true
    done
  fi
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^kolo${owner}(h[0-9]+|hub)$" || true); do
    # processes still inside a host namespace would keep its addresses alive
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  rm -rf "$dir"
}

clean_stale() {
  local owner owners
  owners=$( { ip netns list 2>/dev/null | awk '{print $1}' | sed -nE 's/^kolo([0-9]+)(h[0-9]+|hub)$/\1/p';
             ls "$STATE_ROOT" 2>/dev/null | sed -nE 's/^kolo([0-9]+)$/\1/p'; } | sort -u || true)
  for owner in $owners; do
    kill -0 "$owner" 2>/dev/null || remove_set "$owner"
  done
}

apply_rate() { # ns dev rate
  local ns=$1 dev=$2 rate=$3
  ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
  [ "$rate" = none ] && return 0
  # tbf: a burst of a few milliseconds at the rate (at least 64 KiB), a 20 ms queue
  local bits burst
  bits=$(numfmt --from=si "${rate%bit}" 2>/dev/null || echo 1000000000)
  burst=$((bits / 8 / 250)); [ "$burst" -ge 65536 ] || burst=65536
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms
}

up() {
  local owner=$1 n=$2 rate=${3:-none} i ns
  [ "$n" -ge 1 ] && [ "$n" -le 200 ] || die "N must be 1..200"
  kill -0 "$owner" 2>/dev/null || die "owner process $owner is not alive"
  can_make_namespaces
  clean_stale
  remove_set "$owner"
  local dir="$STATE_ROOT/$(set_name "$owner")" hub="kolo${owner}hub"
  mkdir -p "$dir"
  ip netns add "$hub"
  ip netns exec "$hub" ip link set lo up
  ip netns exec "$hub" ip link add br0 type bridge
  ip netns exec "$hub" ip link set br0 up
  for i in $(seq 0 $((n - 1))); do
    ns=$(host_ns "$owner" "$i")
    ip netns add "$ns"
    ip netns exec "$ns" ip link set lo up
    # the veth pair is created inside the hub, one end moved into the host
    ip netns exec "$hub" ip link add "v$i" type veth peer name eth0
    ip netns exec "$hub" ip link set eth0 netns "$ns"
    ip netns exec "$hub" ip link set "v$i" master br0 up
    ip netns exec "$ns" ip addr add "$SUBNET.$((i + 1))/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    if [ "$rate" != none ]; then
      apply_rate "$ns" eth0 "$rate"      # host -> bridge
      apply_rate "$hub" "v$i" "$rate"    # bridge -> host
    fi
    # the anchor: own hostname and /dev/shm; dies with the owner
    ip netns exec "$ns" unshare --uts --mount --propagation private sh -c '
      mount -t tmpfs -o size=1g,mode=1777 tmpfs /dev/shm && hostname "$1" || exit 1
      echo ready > "$2"
      while kill -0 "$3" 2>/dev/null; do sleep 1; done' anchor "kolo-h$i" "$dir/h$i.ready" "$owner" \
      </dev/null >/dev/null 2>&1 &
    echo $! >"$dir/h$i.anchor"
  done
  for i in $(seq 0 $((n - 1))); do
    for _ in $(seq 1 100); do [ -e "$dir/h$i.ready" ] && break; sleep 0.05; done
    [ -e "$dir/h$i.ready" ] || { remove_set "$owner"; die "host h$i did not come up"; }
    echo "h$i $SUBNET.$((i + 1))"
  done
}

host_exec() {
  local owner=$1 i=$2; shift 2
  local anchor; anchor=$(anchor_pid "$owner" "$i") || die "no host h$i in set $(set_name "$owner")"
  # the anchor is `unshare`'s child shell: its namespaces are the host's
  exec nsenter --target "$anchor" --net --uts --mount -- "$@"
}

partition() {
  local owner=$1 i=$2 mode=$3 peer=${4:-}
  local ns; ns=$(host_ns "$owner" "$i")
  local match=()
  case "$mode" in
    in)   [ -n "$peer" ] && match=(-s "$peer"); ip netns exec "$ns" iptables -A INPUT "${match[@]}" -j DROP ;;
    out)  [ -n "$peer" ] && match=(-d "$peer"); ip netns exec "$ns" iptables -A OUTPUT "${match[@]}" -j DROP ;;
    both) partition "$owner" "$i" in "$peer"; partition "$owner" "$i" out "$peer" ;;
    *) die "partition mode is in, out or both" ;;
  esac
}

heal() {
  local ns; ns=$(host_ns "$1" "$2")
  ip netns exec "$ns" iptables -F INPUT
  ip netns exec "$ns" iptables -F OUTPUT
}

case "${1:-}" in
  up) [ $# -ge 3 ] || die "usage: up OWNER_PID N [RATE]"; up "$2" "$3" "${4:-none}" ;;
  exec) [ $# -ge 4 ] || die "usage: exec OWNER_PID I CMD..."; shift; host_exec "$@" ;;
  partition) [ $# -ge 4 ] || die "usage: partition OWNER_PID I in|out|both [PEER]"; partition "$2" "$3" "$4" "${5:-}" ;;
  heal) [ $# -eq 3 ] || die "usage: heal OWNER_PID I"; heal "$2" "$3" ;;
  rate) [ $# -eq 4 ] || die "usage: rate OWNER_PID I RATE"
        apply_rate "$(host_ns "$2" "$3")" eth0 "$4"; apply_rate "kolo$2hub" "v$3" "$4" ;;
  down) [ $# -eq 2 ] || die "usage: down OWNER_PID"; remove_set "$2" ;;
  clean-stale) clean_stale ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 2 ;;
esac
