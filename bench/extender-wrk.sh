#!/bin/sh
# bench/extender-wrk.sh BUILD_DIR [SECONDS] [NODES...] - throughput and latency
# of the standalone extender's /filter and /prioritize under wrk (Debian's
# wrk package), next to the same server's /healthz as the transport ceiling.
# Prints one table row per (nodes, endpoint): requests/s, p50, p99.
# Defaults: 10 s per run, 1000 and 5000 nodes x 8 GPUs, 2 wrk threads and
# 8 connections against 4 server threads. CONNS=1 measures one client at a
# time: the latency of a request alone, without queueing behind the
# scheduler lock. Each /filter and /prioritize runs twice: once with the
# same request again and again ("same pod"), once with a different pod in
# every request ("new pod": distinct name and UID, same GPU request), so
# that nothing keyed on the request bytes or the pod flatters the numbers.
# PODS=same or PODS=new runs only that one. The /unknown row POSTs the
# /filter body to a path that does not exist (404, no work done): what
# moving a request of that size costs alone, a second transport ceiling.
set -eu
conns=${CONNS:-8}; threads=2; [ "$conns" -lt 2 ] && threads=1
build=$1; secs=${2:-10}; shift 2 2>/dev/null || shift $#
nodes=${*:-"1000 5000"}
here=$(cd "$(dirname "$0")" && pwd)
command -v wrk >/dev/null || { echo "wrk is not installed (apt-get install wrk)"; exit 1; }
. "$here/extender-lib.sh"
extender_setup $nodes
pods=${PODS:-"same new"}
printf "%-6s %-11s %-8s %10s %9s %9s\n" nodes endpoint pod "req/s" p50 p99
for n in $nodes; do
  # wrk is not kube-scheduler: it binds none of the pods it filters, so no
  # /filter may wait for a /bind (filter_wait, docs/extender.md)
  extender_start "$build" "$n" --filter-wait 0
  runs="healthz:- unknown:-"
  for p in $pods; do runs="$runs filter:$p prioritize:$p"; done
  for run in $runs; do
    ep=${run%%:*}; pod=${run#*:}
    if [ $ep = healthz ]; then
      out=$(wrk -t$threads -c$conns -d"${secs}s" --latency "http://127.0.0.1:$port/healthz")
    elif [ $ep = unknown ]; then
      out=$(BODY="$work/filter-$n.json" UNIQUE=0 wrk -t$threads -c$conns -d"${secs}s" \
            --latency -s "$here/extender_post.lua" "http://127.0.0.1:$port/unknown" |
            grep -v Non-2xx)
    else
      unique=0; [ "$pod" = new ] && unique=1
      out=$(BODY="$work/$ep-$n.json" UNIQUE=$unique wrk -t$threads -c$conns -d"${secs}s" \
            --latency -s "$here/extender_post.lua" "http://127.0.0.1:$port/$ep")
    fi
    rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
    p50=$(echo "$out" | awk '$1 == "50%" {print $2}')
    p99=$(echo "$out" | awk '$1 == "99%" {print $2}')
    non2xx=$(echo "$out" | awk '/Non-2xx/ {print $NF}')
    [ -n "$non2xx" ] && { echo "$ep: $non2xx non-2xx answers"; exit 1; }
    printf "%-6s %-11s %-8s %10s %9s %9s\n" "$n" "/$ep" "$pod" "$rps" "$p50" "$p99"
  done
  extender_stop
done
