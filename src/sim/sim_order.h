/*
 * sim/sim_order.h - the order of arrival in the bound for work-conserving
 * schedulers (docs/benchmark.md, "A bound from the order of arrival").
 *
 * The offline LP (sim_lp.h) may leave out any pod; a work-conserving
 * scheduler places every pod that fits when it arrives, so what it fails
 * follows from what came before. A trigger set (from a one-GPU class R:
 * its triggers are the one-GPU pods no larger than R in share, CPU and
 * memory and allowed wherever R is; its targets the GPU pods no smaller,
 * allowed only where R is) has this property: once a trigger fails, no
 * target placed later fits anywhere (no departures in the arrival-only
 * benchmark). So a run whose first trigger failure is at t0 holds every
 * trigger before t0 and no target from t0 on. sim_order_bound splits the
 * runs into cases by where t0 of a few trigger sets lies (branch and bound
 * on the case with the lowest LP), bounds each case by its LP, and takes,
 * per sample of the bin, the lowest case: every run is in some case.
 *
 * Ownership: no state kept; GLPK objects live inside one call. Not
 * thread-safe (GLPK's environment).
 */
#ifndef GPUSCHED_SIM_ORDER_H
#define GPUSCHED_SIM_ORDER_H

#include "sim/sim_bound.h"
#include "sim/sim_trace.h"
#include "util/err.h"

/* Mean over the samples i in [first, last] of the lower bound on the
 * unallocated GPU % that a work-conserving run leaves once the pods
 * t->pods[idx[0..i]] have arrived: forced[i] (NULL: none) marks pods
 * every such run places (sim_forced.h). An infeasible LP without cases
 * means the forcing test is wrong: an error, no bound. */
int sim_order_bound(const struct sim_trace *t, const int *idx, int first, int last,
                    const unsigned char *forced, double *unalloc_pct,
                    struct sim_bound_stats *st, struct gs_err *e);

/* Checks the lemma on one run of the pods idx[0..n) (placed[i]: pod i was
 * placed): for the trigger set of every one-GPU class, no target after the
 * first failed trigger was placed. *sets_checked: the sets where a trigger
 * failed and a target came after it. An error names the two pods. */
int sim_order_check(const struct sim_trace *t, const int *idx, int n,
                    const unsigned char *placed, int *sets_checked, struct gs_err *e);

#endif
