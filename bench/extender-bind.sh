#!/bin/sh
# bench/extender-bind.sh BUILD_DIR [PODS] [CONNS...] - standalone /bind with
# the journal on disk: binds per second, the /bind round trip's p50/p99 and
# the journal's disk flushes per bind, under 1 and 8 connections (default;
# 4000 pods per run, each a new pod taking one GPU, on 1000 nodes x 8 GPUs).
# Each run starts a fresh extender with an empty journal in a directory
# under BUILD_DIR (so on the disk the build is on; STATE_PARENT=DIR puts it
# elsewhere). THREADS sets the extender's HTTP workers (default 4, the
# extender's default): at most that many binds are in flight at once.
set -eu
build=$1; pods=${2:-4000}; shift 2 2>/dev/null || shift $#
conns=${*:-"1 8"}
nodes=$(( (pods + 7) / 8 )); [ $nodes -lt 1000 ] && nodes=1000
here=$(cd "$(dirname "$0")" && pwd)
. "$here/extender-lib.sh"
extender_setup $nodes
state_parent=${STATE_PARENT:-$build}
printf "%5s %6s %10s %9s %9s %11s\n" conns binds "binds/s" "p50 ms" "p99 ms" "flush/bind"
for c in $conns; do
  state=$(mktemp -d -p "$state_parent" bind-state.XXXXXX)
  # every pod is filtered before any is bound: no /filter waits for a /bind
  extender_start "$build" "$nodes" --state-dir "$state" --threads "${THREADS:-4}" --filter-wait 0
  "$build/bench_bind" "http://127.0.0.1:$port" "$nodes" "$pods" "$c" || { rm -rf "$state"; exit 1; }
  extender_stop
  rm -rf "$state"
done
