/*
 * sim/sim_forced.c - the forcing test (sim_forced.h; the proof is in
 * docs/benchmark.md).
 *
 * Pod p (g GPUs of share m, CPU c, memory mem) fails at its arrival only if
 * every node n it fits when empty (its *eligible* nodes, G_n GPUs, C_n CPU,
 * M_n memory) is killed by the pods placed before it, in one of three ways:
 *
 *   GPU:    at least kappa_n = G_n - g + 1 GPUs that no longer fit p; such a
 *           GPU holds at least mu = 1001 - m milli (m < 1000), or at least
 *           one pod (m = 1000, a whole GPU);
 *   CPU:    at least gamma_n = C_n - c + 1 CPU used;
 *   memory: at least eta_n = M_n - mem + 1 memory used.
 *
 * The earlier pods that fit an eligible node when empty (the others are
 * never on one) bound what all eligible nodes together can hold: K killed
 * GPUs (sum of g_q min(mu, m_q) / mu, or sum g_q for a whole p: a GPU that
 * holds mu milli has pods whose min(mu, m_q) add up to mu), B_c CPU and
 * B_e memory. A cover picks a way r(n) for every eligible node with
 * sum_n cost(n, r(n)) <= (K, B_c, B_e); for any lambda >= 0,
 *
 *   sum_n min_{r usable} lambda . cost(n, r)  <=  lambda . (K, B_c, B_e)
 *
 * (a way is usable when its cost alone is within the budget), so a lambda
 * that breaks this proves that no cover exists: p fits somewhere. Budgets
 * only grow along the list, so the same lambda proves it for every earlier
 * pod of p's class; a binary search per class finds the last pod it proves.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sim/sim_forced.h"
#include "sim/sim_lp.h"
#include "sim/sim_run.h"

#define GRID 16   /* coarse grid steps on the simplex of lambda weights */
#define REFINE 24 /* halvings of the local search around the best point */

struct fclass {
    const struct sim_pod *p; /* representative */
    int n_pos, off;          /* its positions: pos[off .. off + n_pos) */
};

struct fctx {
    struct sim_lp_type *nt;
    struct fclass *pc;
    int n_nt, n_pc;
    int *cls;            /* class of each position */
    int *pos;            /* positions grouped by class, ascending */
    unsigned char *fit;  /* fit[k * n_nt + T]: a pod of class k fits an empty node of T */
    unsigned char *rel;  /* scratch per class: can be on an eligible node of the class tested */
    int64_t *budget;     /* scratch: 3 budgets per position of the class tested */
    long double (*cost)[3], *count; /* scratch: struct cover's arrays, per node type */
};

static void fctx_free(struct fctx *x)
{
    free(x->nt);
    free(x->pc);
    free(x->cls);
    free(x->pos);
    free(x->fit);
    free(x->rel);
    free(x->budget);
    free(x->cost);
    free(x->count);
}

static int fctx_build(struct fctx *x, const struct sim_trace *t, const int *idx, int n,
                      struct gs_err *e)
{
    x->nt = calloc((size_t)t->n_nodes + 1, sizeof *x->nt);
    x->pc = calloc((size_t)n + 1, sizeof *x->pc);
    x->cls = malloc(((size_t)n + 1) * sizeof *x->cls);
    x->pos = malloc(((size_t)n + 1) * sizeof *x->pos);
    x->budget = malloc(((size_t)n + 1) * 3 * sizeof *x->budget);
    struct core_pod *cp = calloc(1, sizeof *cp);
    if (!x->nt || !x->pc || !x->cls || !x->pos || !x->budget || !cp) {
        free(cp);
        return gs_errf(e, GS_ENOMEM, "forced: out of memory");
    }
    x->n_nt = sim_lp_node_types(t, x->nt);
    for (int i = 0; i < n; i++) {
        const struct sim_pod *p = &t->pods[idx[i]];
        int k = 0;
        while (k < x->n_pc && !sim_pod_same_shape(x->pc[k].p, p))
            k++;
        if (k == x->n_pc)
            x->pc[x->n_pc++].p = p;
        x->pc[k].n_pos++;
        x->cls[i] = k;
    }
    for (int k = 0, off = 0; k < x->n_pc; k++) {
        x->pc[k].off = off;
        off += x->pc[k].n_pos;
        x->pc[k].n_pos = 0;
    }
    for (int i = 0; i < n; i++) {
        struct fclass *c = &x->pc[x->cls[i]];
        x->pos[c->off + c->n_pos++] = i;
    }
    x->fit = calloc((size_t)x->n_pc * x->n_nt + 1, 1);
    x->rel = calloc((size_t)x->n_pc + 1, 1);
    x->cost = calloc((size_t)x->n_nt + 1, sizeof *x->cost);
    x->count = calloc((size_t)x->n_nt + 1, sizeof *x->count);
    if (!x->fit || !x->rel || !x->cost || !x->count) {
        free(cp);
        return gs_errf(e, GS_ENOMEM, "forced: out of memory");
    }
    for (int k = 0; k < x->n_pc; k++) {
        const struct sim_pod *p = x->pc[k].p;
        sim_core_pod(p, 0, cp);
        for (int T = 0; T < x->n_nt; T++) {
            const struct sim_node *nd = x->nt[T].n;
            x->fit[(size_t)k * x->n_nt + T] =
                p->num_gpu <= nd->gpus && p->cpu_milli <= nd->cpu_milli &&
                p->mem_mib <= nd->mem_mib &&
                (p->num_gpu == 0 || core_request_model_ok(&cp->req, nd->model));
        }
    }
    free(cp);
    return 0;
}

/* The costs of the three ways to kill a node of type T for a pod of class
 * p, and the budgets; way r is usable when its cost is within budget r. */
struct cover {
    int n_el;
    long double (*cost)[3]; /* per eligible type */
    long double *count;
    long double budget[3];
};

/* lambda_r = w_r / budget_r: sum over eligible nodes of the cheapest
 * usable way, minus lambda . budget (> 0: no cover exists). */
static long double slack(const struct cover *cv, const long double w[3])
{
    long double lam[3], rhs = 0, lhs = 0;
    for (int r = 0; r < 3; r++) {
        lam[r] = cv->budget[r] > 0 ? w[r] / cv->budget[r] : 0;
        rhs += lam[r] * cv->budget[r];
    }
    for (int T = 0; T < cv->n_el; T++) {
        long double best = -1;
        for (int r = 0; r < 3; r++)
            if (cv->cost[T][r] <= cv->budget[r] && (best < 0 || lam[r] * cv->cost[T][r] < best))
                best = lam[r] * cv->cost[T][r];
        lhs += cv->count[T] * best;
    }
    /* a margin far above long double rounding on these sums */
    return lhs - rhs * (1 + 1e-12L) - 1e-15L;
}

/* 1 when no cover of the eligible nodes exists within the budgets. */
/* Tries weights w: 1 when they prove the pod forced, else keeps the best
 * slack seen (and its weights) for the climb. */
static int try_weights(const struct cover *cv, const long double w[3], long double best_w[3],
                       long double *best)
{
    long double s = slack(cv, w);
    if (s > 0)
        return 1;
    if (s > *best) {
        *best = s;
        memcpy(best_w, w, 3 * sizeof *w);
    }
    return 0;
}

static int certify(const struct cover *cv)
{
    for (int T = 0; T < cv->n_el; T++) {
        int usable = 0;
        for (int r = 0; r < 3; r++)
            usable |= cv->cost[T][r] <= cv->budget[r];
        if (!usable)
            return 1; /* this node cannot be killed at all */
    }
    long double best_w[3] = {0}, best = -1e30L;
    for (int a = 0; a <= GRID; a++)
        for (int b = 0; a + b <= GRID; b++) {
            long double w[3] = {(long double)a / GRID, (long double)b / GRID,
                                (long double)(GRID - a - b) / GRID};
            if (try_weights(cv, w, best_w, &best))
                return 1;
        }
    /* the slack is concave in w: climb from the best grid point */
    long double step = 1.0L / GRID;
    for (int it = 0; it < REFINE; it++) {
        int moved = 0;
        for (int da = -1; da <= 1; da++)
            for (int db = -1; db <= 1; db++) {
                long double w[3] = {best_w[0] + da * step, best_w[1] + db * step, 0};
                w[2] = 1 - w[0] - w[1];
                if (w[0] < 0 || w[1] < 0 || w[2] < 0 || (da == 0 && db == 0))
                    continue;
                long double before = best;
                if (try_weights(cv, w, best_w, &best))
                    return 1;
                moved |= best > before;
            }
        if (!moved)
            step /= 2;
    }
    return 0;
}

/* Marks the forced pods of class k; returns how many. */
static int mark_class(struct fctx *x, const struct sim_trace *t, const int *idx, int k,
                      unsigned char *forced, struct sim_forced_stats *st)
{
    const struct fclass *pc = &x->pc[k];
    const struct sim_pod *p = pc->p;
    const unsigned char *fp = x->fit + (size_t)k * x->n_nt;
    struct cover cv = {0, x->cost, x->count, {0, 0, 0}};
    for (int T = 0; T < x->n_nt; T++) {
        if (!fp[T])
            continue;
        const struct sim_node *nd = x->nt[T].n;
        cv.cost[cv.n_el][0] = nd->gpus - p->num_gpu + 1;
        cv.cost[cv.n_el][1] = (long double)(nd->cpu_milli - p->cpu_milli + 1);
        cv.cost[cv.n_el][2] = (long double)(nd->mem_mib - p->mem_mib + 1);
        cv.count[cv.n_el] = x->nt[T].count;
        cv.n_el++;
    }
    if (cv.n_el == 0) {
        st->never_fit += pc->n_pos;
        return 0;
    }
    /* which classes can ever be on an eligible node */
    for (int q = 0; q < x->n_pc; q++) {
        const unsigned char *fq = x->fit + (size_t)q * x->n_nt;
        x->rel[q] = 0;
        for (int T = 0; T < x->n_nt && !x->rel[q]; T++)
            x->rel[q] = fp[T] && fq[T];
    }
    /* budgets before each pod of the class: GPU kill units, CPU, memory */
    const int whole = p->gpu_milli >= CORE_MILLI;
    const int64_t mu = whole ? 1 : CORE_MILLI + 1 - p->gpu_milli;
    int64_t kill = 0, cpu = 0, mem = 0;
    int j = 0, last = x->pos[pc->off + pc->n_pos - 1];
    for (int i = 0; i <= last; i++) {
        if (x->cls[i] == k) {
            x->budget[3 * j] = kill / mu;
            x->budget[3 * j + 1] = cpu;
            x->budget[3 * j + 2] = mem;
            j++;
        }
        if (!x->rel[x->cls[i]])
            continue;
        const struct sim_pod *q = &t->pods[idx[i]];
        int64_t share = q->gpu_milli >= CORE_MILLI ? CORE_MILLI : q->gpu_milli;
        kill += (int64_t)q->num_gpu * (whole ? 1 : (share < mu ? share : mu));
        cpu += q->cpu_milli;
        mem += q->mem_mib;
    }
    /* the last pod of the class that a certificate proves forced */
    int lo = 0, hi = pc->n_pos - 1, found = -1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        for (int r = 0; r < 3; r++)
            cv.budget[r] = (long double)x->budget[3 * mid + r];
        st->tests++;
        if (certify(&cv)) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    for (int q = 0; q <= found; q++)
        forced[x->pos[pc->off + q]] = 1;
    if (found + 1 < pc->n_pos) {
        int first = x->pos[pc->off + found + 1];
        if (st->first_unforced < 0 || first < st->first_unforced)
            st->first_unforced = first;
    }
    return found + 1;
}

int sim_forced_mark(const struct sim_trace *t, const int *idx, int n, unsigned char *forced,
                    struct sim_forced_stats *st, struct gs_err *e)
{
    struct sim_forced_stats dummy;
    if (!st)
        st = &dummy;
    memset(st, 0, sizeof *st);
    st->first_unforced = -1;
    memset(forced, 0, (size_t)n);
    if (n <= 0)
        return 0;
    struct fctx x = {0};
    int rc = fctx_build(&x, t, idx, n, e);
    if (rc < 0)
        goto out;
    for (int k = 0; k < x.n_pc; k++) {
        if (x.pc[k].p->num_gpu == 0)
            continue;
        st->classes++;
        st->gpu_pods += x.pc[k].n_pos;
        st->forced += mark_class(&x, t, idx, k, forced, st);
    }
out:
    fctx_free(&x);
    return rc;
}
