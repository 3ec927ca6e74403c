/*
 * sim/sim_lp.h - the LP relaxation shared by the bounds (sim_bound.c, the
 * offline bound; sim_order.c, the bound for work-conserving schedulers):
 * node types, pod classes, the GLPK problem over them, and solves that
 * return a certified optimum. Class rows (how many pods of each class may
 * or must be placed) are the only part the callers change between solves.
 *
 * Ownership: struct sim_lp owns its arrays and the GLPK problem
 * (sim_lp_free). Not thread-safe (GLPK's environment).
 */
#ifndef GPUSCHED_SIM_LP_H
#define GPUSCHED_SIM_LP_H

#include <glpk.h>

#include "sim/sim_bound.h"
#include "sim/sim_trace.h"
#include "util/err.h"

struct sim_lp_type {
    const struct sim_node *n; /* representative */
    int count;
};

struct sim_lp_class {
    const struct sim_pod *p;  /* representative */
    int count, size;          /* size: index into sizes[], -1 for whole GPUs */
    int lo;                   /* forced pods: at least this many placed (sim_forced.h) */
    int hi;                   /* at most this many placed (order cases), INT_MAX: count */
};

/* Growable array of ints for the configurations and the matrix. */
struct sim_lp_ivec {
    int *a;
    size_t n, cap;
};

/* One LP over a list of pods, re-solvable with other class counts. */
struct sim_lp {
    struct sim_lp_type *nt;
    struct sim_lp_class *pc;
    int *cls;                 /* class of each listed pod, -1 for CPU-only */
    unsigned char *model_ok;  /* [k * n_nt + T]: class k's models allow type T (the core's match) */
    int n_nt, n_pc, ns, n_cfg, per_t;
    int sizes[64];
    struct sim_lp_ivec cfg;          /* n_cfg x ns counts */
    glp_prob *lp;
    int *fix;                 /* per column (1-based): the row that repairs its dual */
    int *ind;                 /* scratch for one column (1-based) */
    double *val, *u;          /* scratch: one column; row duals (1-based) */
    int nofeas_ok;            /* sim_lp_solve: an infeasible LP returns 1, not an error */
};

void sim_lp_free(struct sim_lp *m);
/* t's GPU nodes grouped by shape (sim_node_same_shape) into nt (room for
 * t->n_nodes); returns how many types. */
int sim_lp_node_types(const struct sim_trace *t, struct sim_lp_type *nt);
/* Node types of t's GPU nodes and classes of the pods t->pods[idx[0..n)]
 * (count = pods of the class; cls[i] = class of pod i, -1 CPU-only). */
int sim_lp_classes(struct sim_lp *m, const struct sim_trace *t, const int *idx, int n,
                   struct gs_err *e);
/* The GLPK problem of the classes, every class row at [lo, min(count, hi)]. */
int sim_lp_build(struct sim_lp *m, struct gs_err *e);
/* Class row k from pc[k].lo, count and hi. */
void sim_lp_set_class_row(struct sim_lp *m, int k);
/* Solves from the last basis; *milli = the certified optimum. Returns 1
 * for an infeasible LP when nofeas_ok, else an error. */
int sim_lp_solve(struct sim_lp *m, double *milli, double *lp_obj, struct gs_err *e);
/* Weak-duality bound on the LP at the current row bounds from the row
 * duals dual[1..rows] (NULL: GLPK's last solution), repaired. */
double sim_lp_certificate(struct sim_lp *m, const double *dual);

/* Unallocated % of cap that milli leaves (0 at least). */
double sim_lp_pct(double milli, double cap);
/* The last sample's optimum: certified, GLPK's, (dual non-NULL) the row
 * duals dual[1..rows] and (placed non-NULL) the pods of each class k it
 * places, placed[k]. */
struct sim_lp_last {
    double milli, obj;
    double *dual, *placed;
};
/* Solves with the class counts of sample last and, with out (last - first
 * + 1 entries), walks back to sample first writing each sample's bound
 * (sim_lp_pct), taking each GPU pod out of its class count (the counts are
 * left at sample first). Every lower bound must hold at every sample.
 * Returns 0, 1 for an infeasible LP (nofeas_ok), or an error. */
int sim_lp_walk(struct sim_lp *m, int first, int last, double cap, double *out,
                struct sim_lp_last *at_last, int *solves, struct gs_err *e);

/* The stats a bound call fills (the caller's, or *dummy when it passed
 * none), zeroed, and the wall clock at its start. */
struct sim_bound_stats *sim_lp_stats_start(struct sim_bound_stats *st,
                                           struct sim_bound_stats *dummy, double *w0);
void sim_lp_fill_stats(struct sim_bound_stats *st, const struct sim_lp *m);
/* The start of a bound over the samples [first, last]: sim_lp_stats_start,
 * *unalloc_pct = NaN, and an error for a node list without GPUs or an
 * empty range. */
int sim_lp_prefix_start(const struct sim_trace *t, int first, int last, double *unalloc_pct,
                        struct sim_bound_stats **st, struct sim_bound_stats *dummy,
                        double *w0, struct gs_err *e);

#endif
