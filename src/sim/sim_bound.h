/*
 * sim/sim_bound.h - a proven lower bound on the unallocated GPU share of the
 * openb benchmark (docs/benchmark.md, "Lower bound"): the LP relaxation of
 * the offline problem "choose which of the arrived pods to place, and
 * where, to maximise placed GPU milli", solved with GLPK.
 *
 * Nodes are aggregated into types (GPU model, GPU count, CPU, memory) and
 * GPU pods into classes (share, GPU count, CPU, memory, allowed models);
 * variables count the pods of each class on each node type and the GPUs of
 * each type packed with each configuration of sharing sizes. Every real
 * placement is a feasible point, so the LP optimum bounds the GPU milli any
 * policy can hold. CPU-only pods are left out (placing none of them is
 * feasible and they add no GPU milli). The benchmark averages the samples
 * of a bin, so each sample gets the LP of the pods it has seen; values are
 * certified by LP duality, not taken from the solver's objective.
 * sim_bound_offline builds a real placement of the same offline problem,
 * which shows how far any valid bound could still rise.
 *
 * Ownership: no state kept between calls; GLPK objects live inside one call.
 * Not thread-safe (GLPK's environment): call from one thread.
 */
#ifndef GPUSCHED_SIM_BOUND_H
#define GPUSCHED_SIM_BOUND_H

#include "core/policy.h"
#include "sim/sim_run.h"
#include "util/err.h"

#define SIM_BOUND_MAX_CONFIGS 20000 /* beyond: the weaker capacity cut */

struct sim_bound_stats {
    int node_types, classes, sizes, configs; /* configs = 0: the capacity cut was used */
    int rows, cols;
    double lp_milli;  /* certified LP optimum (GPU milli) of the whole pod list / last sample */
    double lp_obj;    /* GLPK's objective for the same LP (lp_milli is at least this, minus
                         the solver's tolerance) */
    double last_pct;  /* sim_bound_run: the bound of the bin's last sample alone, % */
    int samples;      /* sim_bound_run: samples of bin 100, each bounded by its own prefix */
    int solves;       /* LPs solved (one per distinct prefix) */
    double elapsed_s;
    /* sim_bound_run_wc: GPU pods of pods 0..last of the bin and how many of them are
     * forced (sim_forced.h); arrived % once the first GPU pod not proven forced has
     * arrived (NaN: all forced); seconds of the forcing test (in elapsed_s too) */
    int gpu_pods, forced;
    double first_unforced_pct, forced_s;
    /* sim_order_bound: trigger sets, cases at the end, case LPs solved */
    int order_sets, order_cases, order_lps;
};

/* Upper bound on the GPU milli that any placement of the pods
 * t->pods[idx[0..n)] (an index may repeat: clones) can hold on t's nodes. */
int sim_bound_milli(const struct sim_trace *t, const int *idx, int n, double *milli,
                    struct sim_bound_stats *st, struct gs_err *e);

/* Mean over the samples i in [first, last] of the lower bound on the
 * unallocated GPU % of t's capacity once the pods t->pods[idx[0..i]] have
 * arrived (0 at least): one LP per distinct prefix (CPU-only pods add
 * none), re-solved from the last basis. st->lp_milli is the LP of pods
 * 0..last. */
int sim_bound_prefixes(const struct sim_trace *t, const int *idx, int first, int last,
                       double *unalloc_pct, struct sim_bound_stats *st, struct gs_err *e);

/* Lower bound on the benchmark's unallocated GPU % at arrived 100 % for a
 * seed. sim_run averages the samples of bin 100 (arrived in [99.5, 100.5),
 * else within +-1); sample i has seen the pods of sim_order() 0..i, so it
 * is bounded by the LP of that prefix; the result is the mean of those
 * per-sample bounds. */
int sim_bound_run(const struct sim_config *cfg, uint64_t seed, double *unalloc_pct,
                  struct sim_bound_stats *st, struct gs_err *e);

/* The samples [*first, *last] of sim_order()'s order[0..len) that the
 * benchmark averages for bin 100 (*last < 0: none). */
void sim_bound_bin(const struct sim_trace *t, const int *order, int len, int *first, int *last);

/* A bound for work-conserving schedulers, the ones that place every pod
 * that fits some node when it arrives (every policy of the simulator and
 * kube-scheduler): sim_bound_prefixes_wc with forced[i] = 1 where pod i
 * fits some node whatever was placed before it (sim_forced_mark); in the
 * LP of sample i every forced pod of 0..i is placed (a lower bound on its
 * class's row). No work-conserving run places fewer, so each of its
 * samples is a feasible point; the result is never below sim_bound_run's.
 * An infeasible LP means the forcing test is wrong: an error, no bound. */
int sim_bound_prefixes_wc(const struct sim_trace *t, const int *idx, int first, int last,
                          const unsigned char *forced, double *unalloc_pct,
                          struct sim_bound_stats *st, struct gs_err *e);
int sim_bound_run_wc(const struct sim_config *cfg, uint64_t seed, double *unalloc_pct,
                     struct sim_bound_stats *st, struct gs_err *e);

/* How tight the bound is: a real placement of the offline problem the LP
 * relaxes. The LP of the bin's last sample is solved; the pods of each
 * class it places (rounded down; the first ones in arrival order) and the
 * CPU-only pods are submitted through the core with pol, the other GPU pods
 * left out, in three orders: arrival; more GPUs first, model-constrained
 * first, CPU-only last; the same with larger shares first. An offline
 * scheduler may choose its pods and their order, so the best offline
 * placement of the last sample lies between lp_pct and placed_pct (the best
 * order). The same is done for SIM_BOUND_OFFLINE_CPS samples spread over
 * the bin (the LP of each one's pods); what a placement of sample c holds
 * of pods 0..i is a placement of sample i, so every sample of the bin takes
 * the best of those, and placed_bin_pct, their mean, is above the best bin
 * mean: no valid bound of the offline problem (sim_bound_run) rises above
 * it. */
#define SIM_BOUND_OFFLINE_CPS 3
struct sim_bound_offline {
    double lp_pct;     /* the LP bound of the bin's last sample, % unallocated */
    double placed_pct; /* unallocated % after the placement (>= lp_pct) */
    double placed_bin_pct; /* its mean over the samples of bin 100 */
    int dropped;       /* GPU pods of the last sample the LP leaves out */
    int failed;        /* of those kept, pods the core could not place (best order) */
    int order;         /* the best order for the last sample: 0 arrival, 1 big first,
                          2 decreasing */
    int checkpoints;   /* samples whose LP chose a placement's pods */
};

int sim_bound_offline(const struct sim_config *cfg, const struct core_policy *pol, uint64_t seed,
                      struct sim_bound_offline *out, struct gs_err *e);

#endif
