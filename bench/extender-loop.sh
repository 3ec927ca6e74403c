#!/bin/sh
# bench/extender-loop.sh BUILD_DIR [PODS] [NODES...] - the standalone extender
# driven as kube-scheduler drives it: PODS new pods of seven shapes (default 2000),
# each through /filter, /prioritize on the nodes that passed and /bind to
# the best (bench_sched_loop over one keep-alive connection), on 1000 and
# 5000 nodes x 8 GPUs. Prints pods placed per second, each verb's p50/p99,
# filter+prioritize per pod and the same /filter body answered 404, all of
# it again without the first pod of each shape (the cold start), and the
# extender's CPU per pod.
set -eu
build=$1; pods=${2:-2000}; shift 2 2>/dev/null || shift $#
nodes=${*:-"1000 5000"}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/extender-lib.sh"
extender_setup $nodes
extender_cpu() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
for n in $nodes; do
  extender_start "$build" "$n"
  echo "== $n nodes"
  cpu0=$(extender_cpu)
  "$build/bench_sched_loop" "http://127.0.0.1:$port" "$work/filter-$n.json" "$pods"
  cpu1=$(extender_cpu)
  # the extender's own CPU (user + system), steadier than round trips on a busy machine
  awk -v a="$cpu0" -v b="$cpu1" -v p="$pods" -v hz="$(getconf CLK_TCK)" \
    'BEGIN { printf "extender CPU %.3f ms per pod (incl. the 404s)\n", (b - a) * 1000 / hz / p }'
  extender_stop
done
