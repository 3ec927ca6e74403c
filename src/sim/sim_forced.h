/*
 * sim/sim_forced.h - pods that every work-conserving scheduler places.
 *
 * The offline LP bound (sim_bound.h) may leave out any pod, but the
 * schedulers of the benchmark place every pod that fits some node when it
 * arrives. A pod is *forced* when, whatever happened to the pods before it
 * (any subset placed, anywhere), some node still fits it: then every
 * work-conserving policy holds it from its arrival on, and the LP of a
 * sample may require it placed (sim_bound_run_wc). This module proves it
 * with a cheap sufficient test: to make the pod fail, the earlier pods
 * would have to "kill" every node the pod fits when empty, each by filling
 * its CPU, its memory or enough of its GPUs, and their total GPU, CPU and
 * memory is too small for that; a Lagrangian certificate shows no such
 * cover exists (docs/benchmark.md, "A bound for work-conserving
 * schedulers", has the proof).
 *
 * Ownership: no state kept; the caller owns the flags array.
 */
#ifndef GPUSCHED_SIM_FORCED_H
#define GPUSCHED_SIM_FORCED_H

#include "sim/sim_trace.h"
#include "util/err.h"

struct sim_forced_stats {
    int gpu_pods;       /* GPU pods in the list */
    int forced;         /* of those, proven forced */
    int never_fit;      /* GPU pods that fit no empty node (never placed, never forced) */
    int first_unforced; /* position of the first GPU pod that fits some empty node and is
                           not proven forced; -1 if none */
    int classes;        /* GPU pod classes */
    int tests;          /* certificate searches (a binary search per class) */
};

/* forced[i] = 1 when the pod t->pods[idx[i]] is proven to fit some node of
 * t whatever was placed of the pods idx[0..i) (CPU-only pods: 0, they are
 * not the bound's business). Within one class (sim_pod_same_shape) the
 * forced pods are a prefix of its pods in list order. */
int sim_forced_mark(const struct sim_trace *t, const int *idx, int n, unsigned char *forced,
                    struct sim_forced_stats *st, struct gs_err *e);

#endif
