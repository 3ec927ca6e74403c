#!/bin/sh
# bench/e2e-throughput.sh [ARGS...] - pods/s from creation to binding through the
# real kube-scheduler, with the gpusched extender versus without it (whole GPUs
# as a plain extended resource), 500 pods at 1,104 and 5,000 API-only nodes,
# three rounds each, alternating. Needs root and ../shared/k8s (docs/e2e.md).
# Results: docs/performance.md, "Through the real kube-scheduler". Not in CI.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/e2e_throughput.py" "$@"
