#!/bin/sh
# bench/bench_bound_grid.sh - the tables of docs/benchmark.md for issue 15:
# per openb trace, the arrival-only benchmark of bestfit, fgd and cpufrag
# with the LP lower bound (--bound), and the time-driven replay (--mode
# time) of the traces that have timestamps, and how tight the bound is
# (bench_bound_offline, built beside GPUSCHED, cpufrag) and the bound for
# work-conserving schedulers (bench_bound_wc); then
# bench/bench_bound_table.py prints the markdown tables.
#
#   bench/bench_bound_grid.sh [GPUSCHED] [OPENB_DIR] [OUT_DIR] [SEEDS] [TIME_SEEDS]
#
# Defaults: seeds 42-51 for the bound, 42-44 for the replay (--scale 3,
# --load 500,1000,2000).
set -eu
BIN=${1:-build/gpusched}
DATA=${2:-../shared/data/openb}
OUT=${3:-bench-out}
SEEDS=${4:-42-51}
TSEEDS=${5:-42-44}
TRACES="default gpushare20 gpushare40 gpushare60 gpushare80 gpushare100 multigpu20
multigpu30 multigpu40 multigpu50 gpuspec10 gpuspec20 gpuspec25 cpu100 cpu200"
mkdir -p "$OUT"
for t in $TRACES; do
    "$BIN" simulate --nodes "$DATA/openb_node_list_gpu_node.csv" \
        --pods "$DATA/openb_pod_list_$t.csv" --policy bestfit,fgd,cpufrag \
        --seeds "$SEEDS" --bound --json "$OUT/bound-$t.json" > "$OUT/bound-$t.txt"
    "$(dirname "$BIN")/bench_bound_offline" "$DATA/openb_node_list_gpu_node.csv" \
        "$DATA/openb_pod_list_$t.csv" "$SEEDS" cpufrag > "$OUT/offline-$t.txt"
    "$(dirname "$BIN")/bench_bound_wc" "$DATA/openb_node_list_gpu_node.csv" \
        "$DATA/openb_pod_list_$t.csv" "$SEEDS" > "$OUT/wc-$t.txt"
    case $t in multigpu*) continue ;; esac  # no timestamps in these lists
    set -- --json "$OUT/time-$t.json"
    if [ "$t" = default ]; then
        set -- "$@" --plot "$OUT/time-default.svg" \
            --title "openb default, time-driven, workload x3, seeds $TSEEDS"
    fi
    "$BIN" simulate --mode time --nodes "$DATA/openb_node_list_gpu_node.csv" \
        --pods "$DATA/openb_pod_list_$t.csv" --policy bestfit,fgd,cpufrag \
        --seeds "$TSEEDS" --scale 3 --load 500,1000,2000 "$@" > "$OUT/time-$t.txt"
done
# shellcheck disable=SC2086
"$(dirname "$0")/bench_bound_table.py" "$OUT" $TRACES
