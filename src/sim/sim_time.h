/*
 * sim/sim_time.h - the time-driven replay (docs/benchmark.md, "Time-driven
 * replay"): every pod arrives at its creation_time (compressed by a load
 * factor; --scale adds seeded clones of random pods for more demand), runs
 * for its recorded duration once placed, then leaves; a pod
 * that fits nowhere waits in a queue ordered and retried the way
 * kube-scheduler orders and retries it. Measures allocation and pending GPU
 * demand over time, queueing delay per request class, pods left waiting.
 *
 * Exists beside the arrival-only benchmark (sim_run.h), which stays as the
 * published benchmark defines it; both drive the same core calls the
 * extender makes (core_schedule_one, core_reserve, core_unreserve).
 *
 * Every run checks its own bookkeeping and fails with -GS_ECONFLICT when the
 * clock goes backwards, a placed pod never leaves, a pod is placed twice, a
 * pod waits forever though it fits the empty cluster, or the GPU time held
 * differs from the GPU time the placed pods ran. `fault` breaks one of these
 * on purpose, for the tests that prove the checks work.
 *
 * Ownership: results are plain structs; the config borrows sim_config.
 */
#ifndef GPUSCHED_SIM_TIME_H
#define GPUSCHED_SIM_TIME_H

#include <stdint.h>

#include "core/policy.h"
#include "sim/sim_run.h"
#include "util/err.h"

#define SIM_TIME_POINTS 241 /* time-series samples over the arrival window */
#define SIM_CDF_POINTS 101  /* delay quantiles 0, 1, ..., 100 % */

/* Request classes for the delay KPIs. A pod counts in ALL and in each class
 * it belongs to (MODEL overlaps the others); CPU-only pods count in none. */
enum sim_cls { SIM_CLS_ALL, SIM_CLS_WHOLE, SIM_CLS_MULTI, SIM_CLS_SHARE, SIM_CLS_MODEL, SIM_N_CLS };
const char *sim_cls_name(int cls);

/* Test-only: break the replay in one way (its checks must catch it). */
enum sim_fault {
    SIM_FAULT_NONE,
    SIM_FAULT_CLOCK,        /* one departure is scheduled before its pod started */
    SIM_FAULT_LOSE_DEP,     /* the first departure is never scheduled */
    SIM_FAULT_PLACE_TWICE,  /* the first placed pod is queued again */
    SIM_FAULT_NO_RETRY,     /* departures do not move waiting pods back to the queue */
};

struct sim_time_opts {
    double load;            /* arrival times divided by this (0.01 to 1e6) */
    double scale;           /* workload x the trace's GPU request, 1 to 100: clones of
                               random pods (seeded) keep their original's times */
    enum sim_fault fault;
    int exhaustive;         /* test-only: try every waiting pod, no skipping (same results) */
};

struct sim_time_result {
    const struct core_policy *policy;
    uint64_t seed;
    double load, scale;
    int pods, gpu_pods;              /* replayed (clones included); with GPUs */
    double t0, t1;                   /* window: arrival of pod n/100 in arrival order (skips
                                        a sparse lead-in) to the last arrival, replay s */
    double alloc_pct;                /* allocated GPU compute, time-weighted mean over the window */
    double pending_pct;              /* GPU compute asked by waiting pods, same, % of capacity */
    double gpu_hours;                /* GPU-hours held within the window */
    int waiting_at_end;              /* waiting right after the last arrival */
    int never_placed;                /* still waiting when nothing is left to happen */
    int n_delay[SIM_N_CLS];          /* placed GPU pods per class */
    double delay[SIM_N_CLS][3];      /* p50, p90, p99 of queueing delay, s (NaN: none) */
    double delay_mean[SIM_N_CLS];
    double cdf[SIM_CDF_POINTS];      /* delay quantiles of ALL, s */
    double alloc_ts[SIM_TIME_POINTS], pending_ts[SIM_TIME_POINTS]; /* %, at even times */
    long attempts, placements, departures; /* core_schedule_one calls, reserves, unreserves */
    double elapsed_s;
};

/* The trace must have creation_time. Returns 0 or a negative GS_E* code. */
int sim_time_run(const struct sim_config *cfg, const struct sim_time_opts *o,
                 const struct core_policy *pol, uint64_t seed, struct sim_time_result *r,
                 struct gs_err *e);

/* Every load x policy x seed on up to `threads` threads (<= 0: one per
 * CPU); results[(l * n_pols + p) * n_seeds + s]. */
int sim_time_grid(const struct sim_config *cfg, const double *loads, int n_loads, double scale,
                  const struct core_policy *const *pols, int n_pols, const uint64_t *seeds,
                  int n_seeds, int threads, struct sim_time_result *results, struct gs_err *e);

#endif
