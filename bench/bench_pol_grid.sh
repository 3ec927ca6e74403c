#!/bin/sh
# bench/bench_pol_grid.sh - the full openb grid behind docs/policy-cpufrag.md:
# one `gpusched simulate` run per trace, the six published policies and
# cpufrag, seeds 42-51, JSON per trace, the plot for `default`, then the
# table (bench/bench_pol_table.py).
#
#   bench/bench_pol_grid.sh [GPUSCHED] [OPENB_DIR] [OUT_DIR]
#
# About 20 minutes of CPU on 2 cores (15 traces x 7 policies x 10 seeds).
set -eu
BIN=${1:-build/gpusched}
DATA=${2:-../shared/data/openb}
OUT=${3:-bench-out}
TRACES="default gpushare20 gpushare40 gpushare60 gpushare80 gpushare100 multigpu20
multigpu30 multigpu40 multigpu50 gpuspec10 gpuspec20 gpuspec25 cpu100 cpu200"
mkdir -p "$OUT"
for t in $TRACES; do
    set -- --json "$OUT/$t.json"
    if [ "$t" = default ]; then
        set -- "$@" --plot "$OUT/default.svg" --title "openb default, seeds 42-51"
    fi
    "$BIN" simulate --nodes "$DATA/openb_node_list_gpu_node.csv" \
        --pods "$DATA/openb_pod_list_$t.csv" \
        --policy random,dotprod,clustering,packing,bestfit,fgd,cpufrag --seeds 42-51 "$@" \
        > "$OUT/$t.txt"
done
# shellcheck disable=SC2086
"$(dirname "$0")/bench_pol_table.py" "$OUT" $TRACES
