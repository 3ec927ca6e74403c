/*
 * sim/sim_order.c - the order of arrival in the bound for work-conserving
 * schedulers (sim_order.h; the proof is in docs/benchmark.md).
 */
#include <glpk.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sim/sim_lp.h"
#include "sim/sim_order.h"
#include "sim/sim_run.h"
#include "util/clock.h"

/* ---- The order of arrival: a bound for work-conserving schedulers ----
 *
 * A trigger set, from a representative one-GPU class R (share s, CPU c,
 * memory mem): its triggers are the one-GPU pods of share <= s, CPU <= c,
 * memory <= mem, allowed on every node model R is; its targets are the GPU
 * pods of share >= s (or whole GPUs), CPU >= c, memory >= mem, allowed only
 * on models R is. When a work-conserving run first fails a trigger, at t0,
 * every node R may use lacks the trigger's CPU or memory or has every GPU
 * used beyond 1000 - its share; usage only grows (no departures), so from
 * then on no target fits anywhere. So the run holds every trigger that came
 * before t0 and no target that came from t0 on. docs/benchmark.md has the
 * proof and how the cases are chosen. */
struct oset {
    unsigned char *trig, *targ; /* per class */
    int *tpos;                  /* positions of its triggers in 0..last, then last + 1 */
    int nt, ntf;                /* triggers; those before the bin's first sample */
};

/* A case: per set, its first failure t0 is free (nothing known), late (at
 * or after its first trigger in the bin, tpos[ntf], or never) or among
 * its trigger positions tpos[u..v). */
#define O_SETS 8      /* trigger sets: representative classes */
#define O_DROPPED 2   /* of them, the classes the root LP leaves out most of */
#define O_LPS 96      /* case LPs solved per bound */
#define O_COARSE 32   /* ranges first halved to 1/32 of a set's triggers */
#define O_MAX_CASES 1024
enum { O_FREE = -2, O_LATE = -1 };

struct ocase {
    int u[O_SETS], v[O_SETS]; /* v: O_FREE, O_LATE or the end of [u, v) */
    double pct;               /* lower bound on its last-sample bound; INFINITY: no run */
    int exact;                /* pct is the case's own LP */
};

static void oset_free(struct oset *o)
{
    free(o->trig);
    free(o->targ);
    free(o->tpos);
    memset(o, 0, sizeof *o);
}

static int oset_build(struct oset *o, const struct sim_lp *m, int r,
                      int first, int last)
{
    const struct sim_pod *R = m->pc[r].p;
    o->trig = malloc((size_t)m->n_pc + 1);
    o->targ = malloc((size_t)m->n_pc + 1);
    o->tpos = malloc(((size_t)last + 2) * sizeof *o->tpos);
    if (!o->trig || !o->targ || !o->tpos)
        return -1;
    for (int k = 0; k < m->n_pc; k++) {
        const struct sim_pod *p = m->pc[k].p;
        int wider = 1, narrower = 1; /* k's models contain R's / lie within R's */
        for (int T = 0; T < m->n_nt; T++) {
            int a = m->model_ok[(size_t)k * m->n_nt + T], b = m->model_ok[(size_t)r * m->n_nt + T];
            wider &= a || !b;
            narrower &= !a || b;
        }
        o->trig[k] = p->num_gpu == 1 && p->gpu_milli <= R->gpu_milli &&
                     p->cpu_milli <= R->cpu_milli && p->mem_mib <= R->mem_mib && wider;
        o->targ[k] = p->num_gpu >= 1 && p->gpu_milli >= R->gpu_milli &&
                     p->cpu_milli >= R->cpu_milli && p->mem_mib >= R->mem_mib && narrower;
    }
    o->nt = o->ntf = 0;
    for (int i = 0; i <= last; i++)
        if (m->cls[i] >= 0 && o->trig[m->cls[i]]) {
            o->ntf += i < first;
            o->tpos[o->nt++] = i;
        }
    o->tpos[o->nt] = last + 1;
    return 0;
}

/* lo/hi of a case: a late set's triggers before tpos[ntf] are placed; a
 * set with t0 in tpos[u..v) has its triggers before tpos[u] placed and its
 * targets from tpos[v - 1] on not. n is scratch, one per class. */
static void o_case_bounds(const struct sim_lp *m, const struct oset *sets, int n_sets,
                          const struct ocase *c, int *lo, int *hi, int *n)
{
    for (int k = 0; k < m->n_pc; k++) {
        lo[k] = 0;
        hi[k] = INT_MAX;
    }
    for (int a = 0; a < n_sets; a++) {
        const struct oset *o = &sets[a];
        if (c->v[a] == O_FREE)
            continue;
        int lo_end = o->tpos[c->v[a] == O_LATE ? o->ntf : c->u[a]];
        memset(n, 0, (size_t)m->n_pc * sizeof *n);
        for (int i = 0; i < lo_end; i++)
            if (m->cls[i] >= 0)
                n[m->cls[i]]++;
        for (int k = 0; k < m->n_pc; k++)
            if (o->trig[k] && n[k] > lo[k]) /* a class may be a trigger of several sets */
                lo[k] = n[k];
        if (c->v[a] == O_LATE)
            continue;
        int hi_end = o->tpos[c->v[a] - 1];
        memset(n, 0, (size_t)m->n_pc * sizeof *n);
        for (int i = 0; i < hi_end; i++)
            if (m->cls[i] >= 0)
                n[m->cls[i]]++;
        for (int k = 0; k < m->n_pc; k++)
            if (o->targ[k] && n[k] < hi[k])
                hi[k] = n[k];
    }
}

/* Working state of one order bound. */
struct octx {
    struct sim_lp *m;
    struct oset sets[O_SETS];
    int n_sets, first, last;
    double cap;
    const unsigned char *forced; /* NULL: none */
    int *base, *flo;             /* per class: pods of 0..last, forced pods of 0..first */
    int *lo, *hi, *tmp;          /* per class: the case's rows; scratch */
    double *dual, *cur;
    double last_milli, last_obj; /* the last o_eval's last sample: certified, GLPK's */
    struct ocase *cs;
    int nc, solves, case_lps;
};

static int o_max(int a, int b)
{
    return a > b ? a : b;
}

/* Sets the class rows of the case in x->lo/x->hi (forced pods are placed
 * too); 1 when no x meets them. */
static int o_set(struct octx *x)
{
    struct sim_lp *m = x->m;
    int bad = 0;
    for (int k = 0; k < m->n_pc; k++) {
        m->pc[k].count = x->base[k];
        m->pc[k].lo = o_max(x->lo[k], x->flo[k]);
        m->pc[k].hi = x->hi[k];
        bad |= m->pc[k].lo > x->base[k] || m->pc[k].lo > x->hi[k];
    }
    for (int k = 0; k < m->n_pc && !bad; k++)
        sim_lp_set_class_row(m, k);
    return bad;
}

static void o_reset(struct octx *x)
{
    for (int k = 0; k < x->m->n_pc; k++) {
        x->m->pc[k].count = x->base[k];
        x->m->pc[k].lo = x->flo[k];
        x->m->pc[k].hi = INT_MAX;
    }
}

/* Solves the case in x->lo/x->hi at the last sample and, with out, walks
 * back to first writing each sample's bound (%); keeps the last sample's
 * duals in dual and pods placed per class in placed (each may be NULL).
 * Returns 1 when the case is infeasible (no run has it). */
static int o_eval(struct octx *x, double *out, double *last_pct, double *dual, double *placed,
                  struct gs_err *e)
{
    struct sim_lp_last at = {.dual = dual, .placed = placed};
    int rc = o_set(x);
    if (rc == 0 &&
        (rc = sim_lp_walk(x->m, x->first, x->last, x->cap, out, &at, &x->solves, e)) == 0) {
        *last_pct = sim_lp_pct(at.milli, x->cap);
        x->last_milli = at.milli;
        x->last_obj = at.obj;
    }
    o_reset(x);
    return rc;
}

/* Solves case c exactly (its last sample). */
static int o_solve(struct octx *x, struct ocase *c, struct gs_err *e)
{
    o_case_bounds(x->m, x->sets, x->n_sets, c, x->lo, x->hi, x->tmp);
    double pct;
    int r = o_eval(x, NULL, &pct, x->dual, NULL, e);
    if (r < 0)
        return r;
    x->case_lps++;
    c->pct = r == 1 ? INFINITY : pct > c->pct ? pct : c->pct;
    c->exact = 1;
    return 0;
}

/* A case split off an exact parent: no lower than the parent (it is a
 * tighter LP), raised by the certificate of the last duals, repaired and
 * priced at its rows (weak duality holds for any dual-feasible point). */
static void o_child(struct octx *x, struct ocase *c)
{
    c->exact = 0;
    o_case_bounds(x->m, x->sets, x->n_sets, c, x->lo, x->hi, x->tmp);
    double pct = o_set(x) ? INFINITY : sim_lp_pct(sim_lp_certificate(x->m, x->dual), x->cap);
    o_reset(x);
    if (pct > c->pct)
        c->pct = pct;
}

/* The first set of case c whose range holds two triggers or more and more
 * than 1/div of the set's triggers before the bin (div 0: any); n_sets if
 * none. */
static int o_range_to_halve(const struct octx *x, const struct ocase *c, int div)
{
    int a = 0;
    while (a < x->n_sets &&
           !(c->v[a] >= 0 && c->v[a] - c->u[a] >= 2 &&
             (div == 0 || c->v[a] - c->u[a] > x->sets[a].ntf / div)))
        a++;
    return a;
}

static int o_free_set(const struct octx *x, const struct ocase *c)
{
    int a = 0;
    while (a < x->n_sets && c->v[a] != O_FREE)
        a++;
    return a;
}

/* Branch and bound on the lowest case: solve it, or split it. A set's
 * range is halved while it holds more than 1/O_COARSE of the set's
 * triggers before the bin; then the first free set is split (late, or
 * anywhere before the bin); then the ranges are halved down to one
 * trigger. Splitting the other sets at that coarse grain, not after one
 * range is cut to single triggers, leaves fewer cases to refine (on seed
 * 42, +0.04 to +0.09 points on `default`, `gpushare40`, `cpu200`). Every
 * split keeps the cases a cover of all runs. */
static int o_branch(struct octx *x, struct gs_err *e)
{
    int rc;
    while (x->case_lps < O_LPS && x->nc + 2 <= O_MAX_CASES) {
        struct ocase *b = NULL;
        for (int c = 0; c < x->nc; c++)
            if (!b || x->cs[c].pct < b->pct)
                b = &x->cs[c];
        if (!isfinite(b->pct))
            return 0;
        if (!b->exact) {
            if ((rc = o_solve(x, b, e)) < 0)
                return rc;
            continue;
        }
        int a = o_range_to_halve(x, b, O_COARSE);
        if (a == x->n_sets && o_free_set(x, b) == x->n_sets)
            a = o_range_to_halve(x, b, 0);
        struct ocase *h = &x->cs[x->nc];
        *h = *b;
        if (a < x->n_sets) {
            int mid = (b->u[a] + b->v[a]) / 2;
            b->v[a] = mid;
            h->u[a] = mid;
        } else {
            a = o_free_set(x, b);
            if (a == x->n_sets)
                return 0; /* the lowest case cannot be split */
            b->v[a] = O_LATE;
            h->u[a] = 0;
            h->v[a] = x->sets[a].ntf;
            if (h->v[a] == 0)
                h->pct = INFINITY; /* no trigger before the bin: always late */
        }
        x->nc++;
        o_child(x, b);
        if (isfinite(h->pct))
            o_child(x, h);
    }
    return 0;
}

/* The representatives of the trigger sets (see the caller) in cand, from
 * the pods of each class the root LP places at the last sample. */
static int o_sets_chosen(const struct octx *x, const double *placed, int *cand)
{
    const struct sim_lp *m = x->m;
    int n = 0;
    for (int pass = 0; pass < 2; pass++) {
        while (n < (pass == 0 ? O_DROPPED : O_SETS)) {
            int best = -1;
            double best_key = 0;
            for (int k = 0; k < m->n_pc; k++) {
                int taken = 0;
                for (int q = 0; q < n && !taken; q++)
                    taken = cand[q] == k;
                /* pass 0: GPU milli of the pods left out (rounded down) */
                double left = floor(x->base[k] - placed[k] + 1e-6);
                double key = pass == 0 ? left * m->pc[k].p->gpu_milli : m->pc[k].count;
                if (m->pc[k].p->num_gpu == 1 && !taken && key > 0 &&
                    (best < 0 || key > best_key)) {
                    best = k;
                    best_key = key;
                }
            }
            if (best < 0)
                break;
            cand[n++] = best;
        }
    }
    return n;
}

/* per[i]: the minimum over the cases at sample first + i. A case's bound at
 * an earlier sample is no lower than at the last (fewer pods), so a case
 * whose last-sample bound is above every sample's current minimum needs no
 * walk, and one never solved counts with its lower bound at every sample. */
static int o_min_over_cases(struct octx *x, double *per, struct gs_err *e)
{
    int ns = x->last - x->first + 1;
    for (int i = 0; i < ns; i++)
        per[i] = INFINITY;
    for (;;) {
        double worst = -INFINITY;
        for (int i = 0; i < ns; i++)
            if (per[i] > worst)
                worst = per[i];
        struct ocase *c = NULL;
        for (int q = 0; q < x->nc; q++)
            if (x->cs[q].pct < worst && (!c || x->cs[q].pct < c->pct))
                c = &x->cs[q];
        if (!c)
            return 0;
        if (!c->exact) {
            for (int i = 0; i < ns; i++)
                if (c->pct < per[i])
                    per[i] = c->pct;
        } else {
            o_case_bounds(x->m, x->sets, x->n_sets, c, x->lo, x->hi, x->tmp);
            double lp;
            int r = o_eval(x, x->cur, &lp, NULL, NULL, e);
            if (r < 0)
                return r;
            for (int i = 0; r == 0 && i < ns; i++)
                if (x->cur[i] < per[i])
                    per[i] = x->cur[i];
        }
        c->pct = INFINITY; /* counted */
    }
}

int sim_order_bound(const struct sim_trace *t, const int *idx, int first, int last,
                    const unsigned char *forced, double *unalloc_pct,
                    struct sim_bound_stats *st, struct gs_err *e)
{
    double w0;
    struct sim_bound_stats dummy;
    int rc = sim_lp_prefix_start(t, first, last, unalloc_pct, &st, &dummy, &w0, e);
    if (rc < 0)
        return rc;
    struct sim_lp m = {0};
    struct octx x = {.m = &m, .first = first, .last = last, .forced = forced,
                     .cap = (double)t->total_gpus * CORE_MILLI};
    int ns = last - first + 1, cand[O_SETS], n_cand = 0;
    double *plain = malloc((size_t)ns * sizeof *plain), *per = malloc((size_t)ns * sizeof *per);
    double *placed = NULL;
    if ((rc = sim_lp_classes(&m, t, idx, last + 1, e)) < 0)
        goto out;
    size_t pcs = (size_t)m.n_pc + 1;
    x.base = malloc(pcs * sizeof *x.base);
    x.flo = calloc(pcs, sizeof *x.flo);
    x.lo = calloc(pcs, sizeof *x.lo);
    x.hi = malloc(pcs * sizeof *x.hi);
    x.tmp = malloc(pcs * sizeof *x.tmp);
    x.cur = malloc((size_t)ns * sizeof *x.cur);
    x.cs = malloc(O_MAX_CASES * sizeof *x.cs);
    placed = malloc(pcs * sizeof *placed);
    if (!plain || !per || !x.base || !x.flo || !x.lo || !x.hi || !x.tmp || !x.cur ||
        !x.cs || !placed) {
        rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
        goto out;
    }
    for (int k = 0; k < m.n_pc; k++) {
        x.base[k] = m.pc[k].count;
        x.hi[k] = INT_MAX;
    }
    /* the forced pods that every sample of the bin has seen: every lower
     * bound then holds at every sample, so a case's LP only loses pods
     * going back over the bin (its bound never falls), which the search
     * and o_min_over_cases rely on */
    for (int i = 0; forced && i <= first; i++)
        if (forced[i] && m.cls[i] >= 0)
            m.pc[m.cls[i]].lo = ++x.flo[m.cls[i]];
    if ((rc = sim_lp_build(&m, e)) < 0)
        goto out;
    if (!(x.dual = malloc(((size_t)glp_get_num_rows(m.lp) + 1) * sizeof *x.dual))) {
        rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
        goto out;
    }
    /* the root case knows nothing of the order: the LP of every sample with
     * the forced pods held; no case is below it. Infeasible: the forcing
     * test claimed pods no placement holds. */
    double plain_last;
    m.nofeas_ok = 1;
    if ((rc = o_eval(&x, plain, &plain_last, x.dual, placed, e)) != 0) {
        if (rc == 1)
            rc = gs_errf(e, GS_EINVAL, "bound: the forced pods cannot all be placed (LP "
                         "infeasible): the forcing test is wrong, no bound");
        goto out;
    }
    st->lp_milli = x.last_milli;
    st->lp_obj = x.last_obj;
    /* trigger sets: the O_DROPPED one-GPU classes the root LP (forced pods
     * held) of the last sample leaves out most GPU milli of, then those
     * with the most pods (ties: first seen) */
    n_cand = o_sets_chosen(&x, placed, cand);
    for (int q = 0; q < n_cand; q++)
        if (oset_build(&x.sets[x.n_sets++], &m, cand[q], first, last) < 0) {
            rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
            goto out;
        }
    /* the root case knows nothing: the plain LP */
    struct ocase *root = &x.cs[x.nc++];
    for (int a = 0; a < O_SETS; a++)
        root->u[a] = 0, root->v[a] = O_FREE;
    root->pct = plain_last;
    root->exact = 1;
    if ((rc = o_branch(&x, e)) < 0 || (rc = o_min_over_cases(&x, per, e)) < 0)
        goto out;
    double sum = 0;
    for (int i = 0; i < ns; i++) {
        if (!isfinite(per[i])) { /* every run is in some case: one is feasible */
            rc = gs_errf(e, GS_EINVAL, "bound: no case of the order is feasible at sample %d: "
                         "the lemma or the forcing test is wrong, no bound", first + i);
            goto out;
        }
        sum += per[i] > plain[i] ? per[i] : plain[i];
    }
    *unalloc_pct = sum / ns;
    st->samples = ns;
    st->solves = x.solves;
    st->last_pct = plain_last;
    st->order_sets = x.n_sets;
    st->order_cases = x.nc;
    st->order_lps = x.case_lps;
out:
    for (int a = 0; a < O_SETS; a++)
        oset_free(&x.sets[a]);
    free(x.base);
    free(x.flo);
    free(x.lo);
    free(x.hi);
    free(x.tmp);
    free(x.dual);
    free(x.cur);
    free(x.cs);
    sim_lp_fill_stats(st, &m);
    sim_lp_free(&m);
    free(plain);
    free(per);
    free(placed);
    st->elapsed_s = gs_mono_s() - w0;
    return rc;
}

int sim_order_check(const struct sim_trace *t, const int *idx, int n,
                    const unsigned char *placed, int *sets_checked, struct gs_err *e)
{
    struct sim_lp m = {0};
    struct oset o = {0};
    int rc;
    *sets_checked = 0;
    if ((rc = sim_lp_classes(&m, t, idx, n, e)) < 0)
        goto out;
    for (int r = 0; r < m.n_pc && rc == 0; r++) {
        if (m.pc[r].p->num_gpu != 1)
            continue;
        if (oset_build(&o, &m, r, n, n - 1) < 0) {
            rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
            break;
        }
        int t0 = -1;
        for (int q = 0; q < o.nt && t0 < 0; q++)
            if (!placed[o.tpos[q]])
                t0 = o.tpos[q];
        int tested = 0;
        for (int i = t0 < 0 ? n : t0 + 1; i < n; i++) {
            if (m.cls[i] < 0 || !o.targ[m.cls[i]])
                continue;
            tested = 1;
            if (placed[i]) {
                rc = gs_errf(e, GS_EINVAL, "order bound: target at %d (%s) placed after the "
                             "trigger at %d (%s) failed", i, t->pods[idx[i]].name, t0,
                             t->pods[idx[t0]].name);
                break;
            }
        }
        oset_free(&o);
        *sets_checked += tested;
    }
out:
    oset_free(&o);
    sim_lp_free(&m);
    return rc;
}
