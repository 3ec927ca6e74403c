#!/bin/sh
# bench/extender-wrk.sh BUILD_DIR [SECONDS] [NODES...] - throughput and latency
# of the standalone extender's /filter and /prioritize under wrk (Debian's
# wrk package), next to the same server's /healthz as the transport ceiling.
# Prints one table row per (nodes, endpoint): requests/s, p50, p99.
# Defaults: 10 s per run, 1000 and 5000 nodes x 8 GPUs, 2 wrk threads and
# 8 connections against 4 server threads.
set -eu
build=$1; secs=${2:-10}; shift 2 2>/dev/null || shift $#
nodes=${*:-"1000 5000"}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT INT TERM
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)"; exit 1; }
/usr/bin/python3 "$here/extender_gen.py" "$work" $nodes
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
printf "%-6s %-11s %10s %9s %9s\n" nodes endpoint "req/s" p50 p99
for n in $nodes; do
  "$build/gpusched" extender --nodes "$work/nodes-$n.json" --listen "127.0.0.1:$port" \
      --log-level warn --threads 4 &
  pid=$!
  i=0; until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
    i=$((i+1)); [ $i -gt 200 ] && { echo "extender did not start"; exit 1; }; sleep 0.1; done
  for ep in healthz filter prioritize; do
    if [ $ep = healthz ]; then
      out=$(wrk -t2 -c8 -d"${secs}s" --latency "http://127.0.0.1:$port/healthz")
    else
      out=$(BODY="$work/$ep-$n.json" wrk -t2 -c8 -d"${secs}s" --latency \
            -s "$here/extender_post.lua" "http://127.0.0.1:$port/$ep")
    fi
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1 == "50%" {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    [ -n "$non2xx" ] && { echo "$ep: $non2xx non-2xx answers"; exit 1; }
    printf "%-6s %-11s %10s %9s %9s\n" "$n" "/$ep" "$rps" "$p50" "$p99"
  done
  kill $pid; wait $pid 2>/dev/null || true
done
