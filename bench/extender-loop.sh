#!/bin/sh
# bench/extender-loop.sh BUILD_DIR [PODS] [NODES...] - the standalone extender
# driven as kube-scheduler drives it: PODS new one-GPU pods (default 2000),
# each through /filter, /prioritize on the nodes that passed and /bind to
# the best (bench_sched_loop over one keep-alive connection), on 1000 and
# 5000 nodes x 8 GPUs. Prints pods placed per second and each verb's p50/p99.
set -eu
build=$1; pods=${2:-2000}; shift 2 2>/dev/null || shift $#
nodes=${*:-"1000 5000"}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT INT TERM
/usr/bin/python3 "$here/extender_gen.py" "$work" $nodes
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
for n in $nodes; do
  "$build/gpusched" extender --nodes "$work/nodes-$n.json" --listen "127.0.0.1:$port" \
      --log-level warn --threads 4 &
  pid=$!
  i=0; until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
    i=$((i+1)); [ $i -gt 200 ] && { echo "extender did not start"; exit 1; }; sleep 0.1; done
  echo "== $n nodes"
  "$build/bench_sched_loop" "http://127.0.0.1:$port" "$work/filter-$n.json" "$pods"
  kill $pid; wait $pid 2>/dev/null || true
done
