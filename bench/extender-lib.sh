# bench/extender-lib.sh - sourced by the extender benchmarks: their inputs
# and one standalone extender at a time.
#   extender_setup NODES...      writes bench/extender_gen.py's files to $work,
#                                picks a free $port
#   extender_start BUILD N [ARG...]  starts `gpusched extender` on nodes-N.json
#                                (more flags in ARG, e.g. --state-dir DIR)
#                                ($pid) and waits until it is ready
#   extender_stop
work=$(mktemp -d)
pid=
trap 'kill $pid 2>/dev/null || true; rm -rf "$work"' EXIT INT TERM

extender_setup() {
  /usr/bin/python3 "$(dirname "$0")/extender_gen.py" "$work" "$@"
  port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
}

extender_start() {
  b=$1; n=$2; shift 2
  "$b/gpusched" extender --nodes "$work/nodes-$n.json" --listen "127.0.0.1:$port" \
      --log-level warn --threads 4 "$@" &
  pid=$!
  i=0; until curl -sf "http://127.0.0.1:$port/readyz" >/dev/null; do
    i=$((i+1)); [ $i -gt 200 ] && { echo "extender did not start"; exit 1; }; sleep 0.1; done
}

extender_stop() {
  kill $pid; wait $pid 2>/dev/null || true
  pid=
}
