/*
 * sim/sim_run.h - the openb benchmark replay (docs/benchmark.md): seeded
 * shuffle, workload tuning, arrival-only replay through the scheduling core,
 * and the per-run metrics binned by arrived workload.
 *
 * One run = one policy x one seed on a fresh cluster; sim_run_grid() spreads
 * runs over threads (each run owns its cluster, the trace is shared
 * read-only).
 *
 * Ownership: struct sim_config borrows the trace and owns the workload
 * classes it derives (sim_config_clear()). Results are plain structs.
 */
#ifndef GPUSCHED_SIM_RUN_H
#define GPUSCHED_SIM_RUN_H

#include <stdint.h>

#include "core/cluster.h"
#include "core/policy.h"
#include "sim/sim_trace.h"
#include "util/err.h"

#define SIM_BINS 131 /* arrived workload 0..130 % */

struct sim_config {
    const struct sim_trace *trace;   /* borrowed */
    double tune;                     /* target total GPU request, x capacity (1.3) */
    double coverage;                 /* typical-workload cut for fragmentation (0.95) */
    struct core_class *classes;      /* the trace's pod classes, file order */
    int n_classes;
    int learned;                     /* 1: no target workload set; the core learns it
                                        from the pods placed, as the extender does */
};

/* Derives the workload classes from the (untuned) trace. */
int sim_config_init(struct sim_config *cfg, const struct sim_trace *t, double tune,
                    struct gs_err *e);
void sim_config_clear(struct sim_config *cfg);

struct sim_run_result {
    const struct core_policy *policy;
    uint64_t seed;
    int pods;                        /* submitted, after tuning */
    int failed;                      /* could not be placed, dropped */
    double unalloc[SIM_BINS];        /* unallocated GPU %, NaN where no sample */
    double frag[SIM_BINS];           /* fragmentation, % of GPU capacity */
    double frag_rate[SIM_BINS];      /* fragmentation, % of unallocated */
    double elapsed_s;
};

/* The benchmark's submission order for a seed: trace pods sorted by name,
 * shuffled, tuned to cfg->tune x capacity (clones repeat an index).
 * *order (len *len) is the caller's to free. */
int sim_order(const struct sim_config *cfg, uint64_t seed, int **order, int *len,
              struct gs_err *e);

/* One replay. Returns 0 or a negative GS_E* code. */
int sim_run(const struct sim_config *cfg, const struct core_policy *pol, uint64_t seed,
            struct sim_run_result *r, struct gs_err *e);

/* The trace's nodes as a fresh core cluster (GPUs "GPU-<node>-<i>"), shared
 * by the replays. */
int sim_build_cluster(struct core_cluster *c, const struct sim_trace *t, struct gs_err *e);

/* sim_build_cluster, then the target workload (the trace's classes, unless
 * cfg->learned) and the seed: the cluster every replay starts from. */
int sim_cluster_init(struct core_cluster *c, const struct sim_config *cfg, uint64_t seed,
                     struct gs_err *e);

/* Fills a reusable core_pod (uid "p<uid>") with a trace pod's request:
 * CPU-only, WHOLE at 1000 milli, else SHARED; gpu_spec -> allowed models. */
struct core_pod;
void sim_core_pod(const struct sim_pod *p, int uid, struct core_pod *cp);

/* The same replay of pods order[0..len) without the metrics: placed[i] = 1
 * when order[i] was placed (the bounds' tests and benchmarks check forced
 * pods against it). */
int sim_replay_placed(const struct sim_config *cfg, const struct core_policy *pol, uint64_t seed,
                      const int *order, int len, unsigned char *placed, struct gs_err *e);
/* The same, and (state non-NULL) the cluster as the replay left it, which
 * the caller frees with core_cluster_free (NULL on an error). */
int sim_replay_state(const struct sim_config *cfg, const struct core_policy *pol, uint64_t seed,
                     const int *order, int len, unsigned char *placed,
                     struct core_cluster **state, struct gs_err *e);

/* Runs job(ud, j, e) for j in 0..n_jobs-1 on up to `threads` threads (<= 0:
 * one per CPU; at most 64); stops handing out jobs after the first failure,
 * whose error it returns. */
int sim_jobs_run(int n_jobs, int threads, int (*job)(void *ud, int j, struct gs_err *e), void *ud,
                 struct gs_err *e);

/* Every policy x seed on up to `threads` threads (<= 0: one per CPU);
 * results[p * n_seeds + s]. Returns the first error, if any. */
int sim_run_grid(const struct sim_config *cfg, const struct core_policy *const *pols, int n_pols,
                 const uint64_t *seeds, int n_seeds, int threads, struct sim_run_result *results,
                 struct gs_err *e);

#endif
