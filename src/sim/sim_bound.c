/*
 * sim/sim_bound.c - the LP bounds (sim_bound.h; the proof is in
 * docs/benchmark.md): per sample of the 100 % bin, the LP of the pods it
 * has seen (sim_lp.h); for work-conserving schedulers, the same with the
 * forced pods and the order of arrival (sim_order.h); and a real offline
 * placement that shows how far a bound could still rise.
 */
#include <glpk.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sim/sim_bound.h"
#include "sim/sim_forced.h"
#include "sim/sim_lp.h"
#include "sim/sim_order.h"
#include "util/clock.h"

int sim_bound_milli(const struct sim_trace *t, const int *idx, int n, double *milli,
                    struct sim_bound_stats *st, struct gs_err *e)
{
    double w0;
    struct sim_bound_stats dummy;
    st = sim_lp_stats_start(st, &dummy, &w0);
    *milli = 0;
    struct sim_lp m = {0};
    int rc;
    if ((rc = sim_lp_classes(&m, t, idx, n, e)) == 0 && (rc = sim_lp_build(&m, e)) == 0)
        rc = sim_lp_solve(&m, milli, &st->lp_obj, e);
    sim_lp_fill_stats(st, &m);
    st->solves = rc == 0;
    st->lp_milli = *milli;
    sim_lp_free(&m);
    st->elapsed_s = gs_mono_s() - w0;
    return rc;
}

int sim_bound_prefixes(const struct sim_trace *t, const int *idx, int first, int last,
                       double *unalloc_pct, struct sim_bound_stats *st, struct gs_err *e)
{
    double w0;
    struct sim_bound_stats dummy;
    int rc = sim_lp_prefix_start(t, first, last, unalloc_pct, &st, &dummy, &w0, e);
    if (rc < 0)
        return rc;
    const double cap = (double)t->total_gpus * CORE_MILLI;
    /* one LP per distinct prefix, from the last sample back, each step
     * taking one pod out of its class bound and re-solving from the basis */
    struct sim_lp m = {0};
    struct sim_lp_last at_last = {0};
    int ns = last - first + 1;
    double *per = malloc((size_t)ns * sizeof *per), sum = 0;
    if (!per) {
        rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
        goto out;
    }
    if ((rc = sim_lp_classes(&m, t, idx, last + 1, e)) < 0 || (rc = sim_lp_build(&m, e)) < 0 ||
        (rc = sim_lp_walk(&m, first, last, cap, per, &at_last, &st->solves, e)) < 0)
        goto out;
    for (int i = 0; i < ns; i++)
        sum += per[i];
    st->lp_milli = at_last.milli;
    st->lp_obj = at_last.obj;
    st->samples = ns;
    *unalloc_pct = sum / ns;
    st->last_pct = per[ns - 1];
out:
    free(per);
    sim_lp_fill_stats(st, &m);
    sim_lp_free(&m);
    st->elapsed_s = gs_mono_s() - w0;
    return rc;
}

int sim_bound_prefixes_wc(const struct sim_trace *t, const int *idx, int first, int last,
                          const unsigned char *forced, double *unalloc_pct,
                          struct sim_bound_stats *st, struct gs_err *e)
{
    return sim_order_bound(t, idx, first, last, forced, unalloc_pct, st, e);
}

/* The samples the benchmark averages for bin 100 (sim_run's bin_samples):
 * those whose arrived % rounds to 100, else those within +-1; arrived only
 * grows, so either set is a run [first, last] (last < 0: none). */
void sim_bound_bin(const struct sim_trace *t, const int *order, int len, int *first, int *last)
{
    const double cap = (double)t->total_gpus * CORE_MILLI;
    double arrived = 0;
    int first_in = -1, last_in = -1, first_near = -1, last_near = -1;
    for (int i = 0; i < len; i++) {
        const struct sim_pod *p = &t->pods[order[i]];
        arrived += (double)p->num_gpu * p->gpu_milli;
        double a = 100.0 * arrived / cap;
        if (lround(a) == 100) {
            if (first_in < 0)
                first_in = i;
            last_in = i;
        }
        if (fabs(a - 100.0) <= 1.0) {
            if (first_near < 0)
                first_near = i;
            last_near = i;
        }
    }
    *first = last_in >= 0 ? first_in : first_near;
    *last = last_in >= 0 ? last_in : last_near;
}

/* sim_bound_run, or with wc the forced pods held (sim_bound_run_wc). */
static int bound_run(const struct sim_config *cfg, uint64_t seed, int wc, double *unalloc_pct,
                     struct sim_bound_stats *st, struct gs_err *e)
{
    const struct sim_trace *t = cfg->trace;
    struct sim_bound_stats dummy;
    *unalloc_pct = NAN;
    if (!st)
        st = &dummy;
    memset(st, 0, sizeof *st);
    if (t->total_gpus <= 0)
        return gs_errf(e, GS_EINVAL, "the node list has no GPUs");
    int *order, len, rc;
    if ((rc = sim_order(cfg, seed, &order, &len, e)) < 0)
        return rc;
    int first, last;
    unsigned char *forced = NULL;
    struct sim_forced_stats fs;
    sim_bound_bin(t, order, len, &first, &last);
    if (last < 0) {
        rc = gs_errf(e, GS_EINVAL, "bound: the workload never reaches arrived 100 %%");
        goto out;
    }
    if (wc) {
        double w0 = gs_mono_s();
        if (!(forced = malloc((size_t)last + 1))) {
            rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
            goto out;
        }
        if ((rc = sim_forced_mark(t, order, last + 1, forced, &fs, e)) < 0)
            goto out;
        double forced_s = gs_mono_s() - w0;
        if ((rc = sim_bound_prefixes_wc(t, order, first, last, forced, unalloc_pct, st, e)) < 0)
            goto out;
        st->forced = fs.forced;
        st->gpu_pods = fs.gpu_pods;
        st->forced_s = forced_s;
        st->elapsed_s += forced_s;
        st->first_unforced_pct = NAN;
        if (fs.first_unforced >= 0) {
            double arrived = 0;
            for (int i = 0; i <= fs.first_unforced; i++)
                arrived += (double)t->pods[order[i]].num_gpu * t->pods[order[i]].gpu_milli;
            st->first_unforced_pct = 100.0 * arrived / ((double)t->total_gpus * CORE_MILLI);
        }
    } else {
        rc = sim_bound_prefixes(t, order, first, last, unalloc_pct, st, e);
    }
out:
    free(forced);
    free(order);
    return rc;
}

int sim_bound_run(const struct sim_config *cfg, uint64_t seed, double *unalloc_pct,
                  struct sim_bound_stats *st, struct gs_err *e)
{
    return bound_run(cfg, seed, 0, unalloc_pct, st, e);
}

int sim_bound_run_wc(const struct sim_config *cfg, uint64_t seed, double *unalloc_pct,
                     struct sim_bound_stats *st, struct gs_err *e)
{
    return bound_run(cfg, seed, 1, unalloc_pct, st, e);
}

/* Submission orders of the offline placement: a key per kept pod, ascending,
 * ties in arrival order. */
enum { OFF_ARRIVAL, OFF_BIG_FIRST, OFF_DECREASING, OFF_ORDERS };

static double off_key(const struct sim_pod *p, int order_kind)
{
    if (order_kind == OFF_ARRIVAL)
        return 0;
    if (p->num_gpu == 0)
        return 1e12; /* CPU-only pods last */
    /* more GPUs first, then model-constrained pods first */
    double k = -1e9 * p->num_gpu - (p->gpu_spec[0] ? 1e6 : 0);
    if (order_kind == OFF_DECREASING)
        k -= p->gpu_milli; /* then larger shares first */
    return k;
}

struct off_item {
    double key;
    int pos;
};

static int cmp_off(const void *a, const void *b)
{
    const struct off_item *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

/* One placement of items[0..n) (positions into order) on a fresh cluster:
 * at[pos] the GPU milli placed for the pod at pos (0 if it failed), *failed
 * the pods that did not fit. */
static int off_place(const struct sim_config *cfg, const struct core_policy *pol, uint64_t seed,
                     const int *order, const struct off_item *items, int n, double *at,
                     int *failed, struct gs_err *e)
{
    const struct sim_trace *t = cfg->trace;
    struct core_cluster *c = core_cluster_new();
    struct core_pod *cp = calloc(1, sizeof *cp);
    int rc = 0;
    *failed = 0;
    if (!c || !cp) {
        rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
        goto out;
    }
    if ((rc = sim_cluster_init(c, cfg, seed, e)) < 0)
        goto out;
    struct core_decision d;
    for (int i = 0; i < n; i++) {
        const struct sim_pod *p = &t->pods[order[items[i].pos]];
        sim_core_pod(p, items[i].pos, cp);
        at[items[i].pos] = 0;
        if (core_schedule_one(c, pol, cp, &d, NULL) == 0 && core_reserve(c, &d.alloc, NULL) == 0)
            at[items[i].pos] = (double)p->num_gpu * p->gpu_milli;
        else
            (*failed)++;
    }
out:
    core_cluster_free(c);
    free(cp);
    return rc;
}

int sim_bound_offline(const struct sim_config *cfg, const struct core_policy *pol, uint64_t seed,
                      struct sim_bound_offline *out, struct gs_err *e)
{
    const struct sim_trace *t = cfg->trace;
    memset(out, 0, sizeof *out);
    out->lp_pct = out->placed_pct = out->placed_bin_pct = NAN;
    out->order = -1;
    if (t->total_gpus <= 0)
        return gs_errf(e, GS_EINVAL, "the node list has no GPUs");
    int *order, len, first, last, rc;
    if ((rc = sim_order(cfg, seed, &order, &len, e)) < 0)
        return rc;
    sim_bound_bin(t, order, len, &first, &last);
    struct sim_lp m = {0};
    int *keep = NULL;
    double *xs = NULL, *at = NULL, *best = NULL;
    struct off_item *items = NULL;
    double milli, obj;
    const double cap = (double)t->total_gpus * CORE_MILLI;
    if (last < 0) {
        rc = gs_errf(e, GS_EINVAL, "bound: the workload never reaches arrived 100 %%");
        goto out;
    }
    if ((rc = sim_lp_classes(&m, t, order, last + 1, e)) < 0 || (rc = sim_lp_build(&m, e)) < 0)
        goto out;
    keep = calloc((size_t)m.n_pc + 1, sizeof *keep);
    xs = calloc((size_t)m.n_pc + 1, sizeof *xs);
    items = malloc(((size_t)last + 1) * sizeof *items);
    at = calloc((size_t)last + 1, sizeof *at);
    best = calloc((size_t)last + 1, sizeof *best); /* best milli held at each sample */
    if (!keep || !xs || !items || !at || !best) {
        rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
        goto out;
    }
    /* checkpoints, last first: the LP of each prefix (its class bounds
     * lowered from the last one's, re-solved from the basis) picks pods */
    int cps[SIM_BOUND_OFFLINE_CPS], n_cp = 0;
    for (int q = SIM_BOUND_OFFLINE_CPS - 1; q >= 0; q--) {
        int c = first + (int)((long)(last - first) * q / (SIM_BOUND_OFFLINE_CPS - 1));
        if (n_cp == 0 || c != cps[n_cp - 1])
            cps[n_cp++] = c;
    }
    int at_prefix = last; /* class bounds hold the counts of pods 0..at_prefix */
    for (int q = 0; q < n_cp; q++) {
        int c = cps[q];
        for (; at_prefix > c; at_prefix--) {
            int k = m.cls[at_prefix];
            if (k >= 0) {
                m.pc[k].count--;
                glp_set_row_bnds(m.lp, 1 + k, GLP_UP, 0, m.pc[k].count);
            }
        }
        if ((rc = sim_lp_solve(&m, &milli, &obj, e)) < 0)
            goto out;
        if (q == 0)
            out->lp_pct = 100.0 - 100.0 * milli / cap;
        /* the pods of each class the LP places, rounded down: its x columns
         * are those repaired on the class row */
        memset(xs, 0, ((size_t)m.n_pc + 1) * sizeof *xs);
        for (int j = 1; j <= glp_get_num_cols(m.lp); j++)
            if (m.fix[j] >= 1 && m.fix[j] <= m.n_pc)
                xs[m.fix[j] - 1] += glp_get_col_prim(m.lp, j);
        for (int k = 0; k < m.n_pc; k++)
            keep[k] = (int)floor(xs[k] + 1e-6);
        int n = 0, dropped = 0;
        for (int i = 0; i <= c; i++) {
            int k = m.cls[i];
            if (k >= 0 && keep[k] == 0) { /* left out by the LP */
                dropped++;
                continue;
            }
            if (k >= 0)
                keep[k]--;
            items[n++].pos = i;
        }
        if (q == 0)
            out->dropped = dropped;
        /* a few submission orders; each is a real placement of sample c, and
         * what it holds of pods 0..i is one of sample i (taking pods away
         * keeps a placement feasible), for every sample i of the bin */
        for (int o = 0; o < OFF_ORDERS; o++) {
            for (int i = 0; i < n; i++)
                items[i].key = off_key(&t->pods[order[items[i].pos]], o);
            qsort(items, (size_t)n, sizeof *items, cmp_off);
            int failed;
            memset(at, 0, ((size_t)last + 1) * sizeof *at);
            if ((rc = off_place(cfg, pol, seed, order, items, n, at, &failed, e)) < 0)
                goto out;
            double alloc = 0;
            for (int i = 0; i <= last; i++) {
                alloc += at[i];
                if (i >= first && alloc > best[i])
                    best[i] = alloc;
            }
            double pct = 100.0 - 100.0 * alloc / cap;
            if (q == 0 && (out->order < 0 || pct < out->placed_pct)) {
                out->placed_pct = pct;
                out->failed = failed;
                out->order = o;
            }
        }
    }
    double sum = 0;
    for (int i = first; i <= last; i++)
        sum += 100.0 - 100.0 * best[i] / cap;
    out->placed_bin_pct = sum / (last - first + 1);
    out->checkpoints = n_cp;
out:
    free(best);
    free(at);
    free(keep);
    free(xs);
    free(items);
    sim_lp_free(&m);
    free(order);
    return rc;
}
