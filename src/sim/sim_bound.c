/*
 * sim/sim_bound.c - the LP bound (sim_bound.h; the proof is in
 * docs/benchmark.md). Rows, for every node type T (N nodes of G GPUs, C CPU,
 * M memory) and class k (n_k pods, g GPUs of share m, c CPU, mem memory):
 *
 *   class k:        sum_T x[k,T]                          <= n_k
 *   cpu T:          sum_k c_k x[k,T]                      <= N C
 *   memory T:       sum_k mem_k x[k,T]                    <= N M
 *   GPUs T:         sum_{k whole} g_k x[k,T] + sum_p y[T,p] <= N G
 *   size (T, s):    sum_{k sharing, m_k = s} x[k,T] - sum_p a[p,s] y[T,p] <= 0
 *
 * maximise sum_k g_k m_k x[k,T]. x[k,T] exists only where one pod of k fits
 * an empty node of T (models, GPU count, CPU, memory). p runs over the
 * maximal multisets of sharing sizes with sum <= 1000 (a[p,s] copies of s).
 * When they exceed SIM_BOUND_MAX_CONFIGS, the size rows become one
 * capacity row per type (sum s x <= 1000 Y) plus "at most one share above
 * 500 per GPU" (sum_{s>500} x <= Y), Y a column per type in the GPU row.
 *
 * The value returned is not GLPK's objective but a dual certificate: GLPK's
 * row duals, made feasible (every column's reduced cost repaired on a row
 * whose entries are all non-negative), priced at the row bounds. By weak
 * duality that is an upper bound on the LP optimum whatever the solver's
 * rounding, and it equals the optimum up to the solver's tolerance. It lets
 * sim_bound_run re-solve one LP per sample of the 100 % bin (only class
 * bounds change, so the dual simplex restarts from the last basis).
 */
#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "sim/sim_bound.h"
#include "sim/sim_forced.h"

struct ntype {
    const struct sim_node *n; /* representative */
    int count;
};

struct pclass {
    const struct sim_pod *p;  /* representative */
    int count, size;          /* size: index into sizes[], -1 for whole GPUs */
    int lo;                   /* forced pods: at least this many placed (sim_forced.h) */
};

/* Growable array of ints for the configurations and the matrix. */
struct ivec {
    int *a;
    size_t n, cap;
};

/* One LP over a list of pods, re-solvable with other class counts. */
struct model {
    struct ntype *nt;
    struct pclass *pc;
    int *cls;                 /* class of each listed pod, -1 for CPU-only */
    int n_nt, n_pc, ns, n_cfg, per_t;
    int sizes[64];
    struct ivec cfg;          /* n_cfg x ns counts */
    glp_prob *lp;
    int *fix;                 /* per column (1-based): the row that repairs its dual */
    int *ind;                 /* scratch for one column (1-based) */
    double *val, *u;          /* scratch: one column; row duals (1-based) */
    int solved;
};

static int ipush(struct ivec *v, int x)
{
    if (v->n == v->cap) {
        size_t nc = v->cap ? 2 * v->cap : 1024;
        int *na = realloc(v->a, nc * sizeof *na);
        if (!na)
            return -1;
        v->a = na;
        v->cap = nc;
    }
    v->a[v->n++] = x;
    return 0;
}

/* Maximal multisets of sizes[0..ns) (ascending) with sum <= 1000: each
 * stored as ns counts in cfg. Returns the count, or -1 (memory) / -2
 * (more than the limit). */
static int enum_configs(const int *sizes, int ns, struct ivec *cfg)
{
    int cnt[64] = {0}, found = 0;
    /* iterative DFS over non-increasing size index */
    int stack_i[1100], depth = 0, rem = 1000;
    stack_i[0] = 0;
    for (;;) {
        int i = stack_i[depth];
        /* try to add size >= index i */
        while (i < ns && sizes[i] > rem)
            i++;
        if (i < ns) {
            stack_i[depth] = i;
            cnt[i]++;
            rem -= sizes[i];
            stack_i[++depth] = i;
            continue;
        }
        /* leaf: nothing more at index >= stack start; maximal if no size fits */
        if (rem < sizes[0]) {
            if (found >= SIM_BOUND_MAX_CONFIGS)
                return -2;
            for (int s = 0; s < ns; s++)
                if (ipush(cfg, cnt[s]) < 0)
                    return -1;
            found++;
        }
        /* backtrack */
        if (depth == 0)
            return found;
        depth--;
        int j = stack_i[depth];
        cnt[j]--;
        rem += sizes[j];
        stack_i[depth] = j + 1;
    }
}

static void model_free(struct model *m)
{
    if (m->lp)
        glp_delete_prob(m->lp);
    free(m->nt);
    free(m->pc);
    free(m->cls);
    free(m->cfg.a);
    free(m->fix);
    free(m->ind);
    free(m->val);
    free(m->u);
    memset(m, 0, sizeof *m);
}

/* Node types and pod classes of t's nodes and the pods t->pods[idx[0..n)]. */
static int model_classes(struct model *m, const struct sim_trace *t, const int *idx, int n,
                         struct gs_err *e)
{
    m->nt = calloc((size_t)t->n_nodes + 1, sizeof *m->nt);
    m->pc = calloc((size_t)n + 1, sizeof *m->pc);
    m->cls = malloc(((size_t)n + 1) * sizeof *m->cls);
    if (!m->nt || !m->pc || !m->cls)
        return gs_errf(e, GS_ENOMEM, "bound: out of memory");
    for (int i = 0; i < t->n_nodes; i++) {
        if (t->nodes[i].gpus == 0)
            continue;
        int k = 0;
        while (k < m->n_nt && !sim_node_same_shape(m->nt[k].n, &t->nodes[i]))
            k++;
        if (k == m->n_nt)
            m->nt[m->n_nt++].n = &t->nodes[i];
        m->nt[k].count++;
    }
    for (int i = 0; i < n; i++) {
        const struct sim_pod *p = &t->pods[idx[i]];
        m->cls[i] = -1;
        if (p->num_gpu == 0)
            continue;
        int k = 0;
        while (k < m->n_pc && !sim_pod_same_shape(m->pc[k].p, p))
            k++;
        if (k == m->n_pc) {
            m->pc[k].p = p;
            m->pc[k].size = -1;
            if (p->gpu_milli < CORE_MILLI) {
                int s = 0;
                while (s < m->ns && m->sizes[s] != p->gpu_milli)
                    s++;
                if (s == m->ns) {
                    if (m->ns == 64)
                        return gs_errf(e, GS_EINVAL, "bound: more than 64 sharing sizes");
                    m->sizes[m->ns++] = p->gpu_milli;
                }
            }
            m->n_pc++;
        }
        m->pc[k].count++;
        m->cls[i] = k;
    }
    /* sizes ascending; classes point at their size */
    for (int a = 1; a < m->ns; a++)
        for (int b = a; b > 0 && m->sizes[b - 1] > m->sizes[b]; b--) {
            int x = m->sizes[b];
            m->sizes[b] = m->sizes[b - 1];
            m->sizes[b - 1] = x;
        }
    for (int k = 0; k < m->n_pc; k++)
        if (m->pc[k].p->gpu_milli < CORE_MILLI)
            for (int s = 0; s < m->ns; s++)
                if (m->sizes[s] == m->pc[k].p->gpu_milli)
                    m->pc[k].size = s;
    if (m->ns > 0) {
        m->n_cfg = enum_configs(m->sizes, m->ns, &m->cfg);
        if (m->n_cfg == -1)
            return gs_errf(e, GS_ENOMEM, "bound: out of memory");
        if (m->n_cfg == -2)
            m->n_cfg = 0; /* too many: the capacity cut */
    }
    return 0;
}

/* The matrix, built through these growable triplets. */
struct triplets {
    struct ivec ia, ja;
    double *ar;
    size_t cap;
    int oom;
};

static void entry(struct triplets *tr, int row, int col, double v)
{
    if (tr->oom)
        return;
    if (tr->ia.n == 0 && (ipush(&tr->ia, 0) < 0 || ipush(&tr->ja, 0) < 0)) {
        tr->oom = 1;
        return;
    }
    if (tr->ia.n >= tr->cap) {
        size_t nc = tr->cap ? 2 * tr->cap : 4096;
        double *na = realloc(tr->ar, nc * sizeof *na);
        if (!na) {
            tr->oom = 1;
            return;
        }
        tr->ar = na;
        tr->cap = nc;
    }
    tr->ar[tr->ia.n] = v;
    if (ipush(&tr->ia, row) < 0 || ipush(&tr->ja, col) < 0)
        tr->oom = 1;
}

/* Adds one column with lower bound 0, objective obj, repaired on row fix. */
static int add_col(struct model *m, struct ivec *fix, double obj, int fix_row)
{
    int col = glp_add_cols(m->lp, 1);
    glp_set_col_bnds(m->lp, col, GLP_LO, 0, 0);
    glp_set_obj_coef(m->lp, col, obj);
    if (fix->n == 0 && ipush(fix, 0) < 0)
        return -1;
    return ipush(fix, fix_row) < 0 ? -1 : col;
}

/* Class row k: lo <= pods placed <= count (GLPK wants a fixed row when
 * they are equal). */
static void set_class_row(struct model *m, int k)
{
    const struct pclass *c = &m->pc[k];
    if (c->lo <= 0)
        glp_set_row_bnds(m->lp, 1 + k, GLP_UP, 0, c->count);
    else if (c->lo >= c->count)
        glp_set_row_bnds(m->lp, 1 + k, GLP_FX, c->count, c->count);
    else
        glp_set_row_bnds(m->lp, 1 + k, GLP_DB, c->lo, c->count);
}

static int model_lp(struct model *m, struct gs_err *e)
{
    struct triplets tr = {0};
    struct ivec fix = {0};
    struct core_pod *cp = calloc(1, sizeof *cp);
    int rc = 0;
    if (!cp) {
        rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
        goto out;
    }
    m->lp = glp_create_prob();
    glp_set_obj_dir(m->lp, GLP_MAX);
    /* rows: classes, then per type cpu, mem, gpu, then size rows */
    m->per_t = 3 + (m->n_cfg ? m->ns : 2);
    int n_rows = m->n_pc + m->n_nt * m->per_t;
    glp_add_rows(m->lp, n_rows);
    for (int k = 0; k < m->n_pc; k++)
        set_class_row(m, k);
    for (int T = 0; T < m->n_nt; T++) {
        int base = 1 + m->n_pc + T * m->per_t;
        const struct sim_node *nd = m->nt[T].n;
        double cnt = m->nt[T].count;
        glp_set_row_bnds(m->lp, base, GLP_UP, 0, cnt * (double)nd->cpu_milli);
        glp_set_row_bnds(m->lp, base + 1, GLP_UP, 0, cnt * (double)nd->mem_mib);
        glp_set_row_bnds(m->lp, base + 2, GLP_UP, 0, cnt * nd->gpus);
        for (int r = 3; r < m->per_t; r++)
            glp_set_row_bnds(m->lp, base + r, GLP_UP, 0, 0);
    }
    int col;
    for (int k = 0; k < m->n_pc; k++) {
        const struct sim_pod *p = m->pc[k].p;
        sim_core_pod(p, 0, cp);
        for (int T = 0; T < m->n_nt; T++) {
            const struct sim_node *nd = m->nt[T].n;
            if (p->num_gpu > nd->gpus || p->cpu_milli > nd->cpu_milli ||
                p->mem_mib > nd->mem_mib || !core_request_model_ok(&cp->req, nd->model))
                continue;
            int base = 1 + m->n_pc + T * m->per_t;
            if ((col = add_col(m, &fix, (double)p->num_gpu * p->gpu_milli, 1 + k)) < 0)
                goto oom;
            entry(&tr, 1 + k, col, 1);
            if (p->cpu_milli)
                entry(&tr, base, col, (double)p->cpu_milli);
            if (p->mem_mib)
                entry(&tr, base + 1, col, (double)p->mem_mib);
            if (m->pc[k].size < 0) {
                entry(&tr, base + 2, col, p->num_gpu);
            } else if (m->n_cfg) {
                entry(&tr, base + 3 + m->pc[k].size, col, 1);
            } else {
                entry(&tr, base + 3, col, p->gpu_milli);
                if (p->gpu_milli > CORE_MILLI / 2)
                    entry(&tr, base + 4, col, 1);
            }
        }
    }
    /* sharing GPUs of each type: configurations, or one capacity column;
     * repaired on the GPU row, whose entries are all positive */
    for (int T = 0; T < m->n_nt && m->ns > 0; T++) {
        int base = 1 + m->n_pc + T * m->per_t;
        if (m->n_cfg) {
            for (int q = 0; q < m->n_cfg; q++) {
                if ((col = add_col(m, &fix, 0, base + 2)) < 0)
                    goto oom;
                entry(&tr, base + 2, col, 1);
                for (int s = 0; s < m->ns; s++)
                    if (m->cfg.a[(size_t)q * m->ns + s])
                        entry(&tr, base + 3 + s, col, -(double)m->cfg.a[(size_t)q * m->ns + s]);
            }
        } else {
            if ((col = add_col(m, &fix, 0, base + 2)) < 0)
                goto oom;
            entry(&tr, base + 2, col, 1);
            entry(&tr, base + 3, col, -(double)CORE_MILLI);
            entry(&tr, base + 4, col, -1);
        }
    }
    if (tr.oom)
        goto oom;
    int n_cols = glp_get_num_cols(m->lp);
    if (n_cols > 0)
        glp_load_matrix(m->lp, (int)tr.ia.n - 1, tr.ia.a, tr.ja.a, tr.ar);
    m->fix = fix.a;
    fix.a = NULL;
    m->ind = malloc(((size_t)n_rows + 1) * sizeof *m->ind);
    m->val = malloc(((size_t)n_rows + 1) * sizeof *m->val);
    m->u = malloc(((size_t)n_rows + 1) * sizeof *m->u);
    if (!m->ind || !m->val || !m->u)
        goto oom;
    goto out;
oom:
    rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
out:
    free(cp);
    free(fix.a);
    free(tr.ia.a);
    free(tr.ja.a);
    free(tr.ar);
    return rc;
}

/* Weak duality: GLPK's row duals u (>= 0 for these <= rows of a maximum)
 * repaired so that every column j has sum_i a_ij u_i >= c_j, then
 * sum_i b_i u_i >= the LP optimum. A column short by d raises the dual of
 * its repair row by d (plus a margin for this sum's rounding); that row's
 * entries are all >= 0, so no other column gets worse, and each column's
 * repair row has coefficient 1 in it. A class row with forced pods
 * (lo <= a x <= count) may keep a negative dual, priced at its lower bound:
 * u a x <= u lo there, so the sum still bounds every feasible x. */
static double certificate(struct model *m)
{
    glp_prob *lp = m->lp;
    int rows = glp_get_num_rows(lp), cols = glp_get_num_cols(lp);
    for (int i = 1; i <= rows; i++) {
        double d = glp_get_row_dual(lp, i);
        int lower = i <= m->n_pc && m->pc[i - 1].lo > 0;
        m->u[i] = isfinite(d) && (d > 0 || (lower && d < 0)) ? d : 0;
    }
    for (int j = 1; j <= cols; j++) {
        int len = glp_get_mat_col(lp, j, m->ind, m->val);
        long double lhs = 0;
        for (int q = 1; q <= len; q++)
            lhs += (long double)m->val[q] * m->u[m->ind[q]];
        long double short_by = (long double)glp_get_obj_coef(lp, j) - lhs;
        if (short_by > 0)
            m->u[m->fix[j]] += (double)(short_by * (1 + 1e-12L)) + 1e-9;
    }
    long double ub = 0;
    for (int i = 1; i <= rows; i++)
        ub += (long double)(m->u[i] < 0 ? m->pc[i - 1].lo : glp_get_row_ub(lp, i)) * m->u[i];
    return (double)ub;
}

/* Solves (primal simplex the first time, dual simplex from the last basis
 * after class bounds changed) and returns the certified optimum. */
static int model_solve(struct model *m, double *milli, double *lp_obj, struct gs_err *e)
{
    *milli = 0;
    *lp_obj = 0;
    if (glp_get_num_cols(m->lp) == 0)
        return 0;
    glp_smcp parm;
    glp_init_smcp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_OFF;
    if (m->solved)
        parm.meth = GLP_DUALP;
    int g = glp_simplex(m->lp, &parm);
    if (g != 0 || glp_get_status(m->lp) != GLP_OPT) {
        /* a fresh start from the standard basis before giving up */
        glp_std_basis(m->lp);
        parm.meth = GLP_PRIMAL;
        g = glp_simplex(m->lp, &parm);
    }
    if (g == 0 && glp_get_status(m->lp) == GLP_NOFEAS)
        return gs_errf(e, GS_EINVAL, "bound: the forced pods cannot all be placed (LP "
                       "infeasible): the forcing test is wrong, no bound");
    if (g != 0 || glp_get_status(m->lp) != GLP_OPT)
        return gs_errf(e, GS_EINVAL, "bound: GLPK did not reach an optimum (code %d, status %d)",
                       g, glp_get_status(m->lp));
    m->solved = 1;
    *lp_obj = glp_get_obj_val(m->lp);
    *milli = certificate(m);
    return 0;
}

static double elapsed_since(const struct timespec *w0)
{
    struct timespec w1;
    clock_gettime(CLOCK_MONOTONIC, &w1);
    return (double)(w1.tv_sec - w0->tv_sec) + (double)(w1.tv_nsec - w0->tv_nsec) / 1e9;
}

/* The stats a bound call fills (the caller's, or *dummy when it passed
 * none), zeroed, and the wall clock at its start. */
static struct sim_bound_stats *stats_start(struct sim_bound_stats *st,
                                           struct sim_bound_stats *dummy, struct timespec *w0)
{
    clock_gettime(CLOCK_MONOTONIC, w0);
    if (!st)
        st = dummy;
    memset(st, 0, sizeof *st);
    return st;
}

static void fill_stats(struct sim_bound_stats *st, const struct model *m)
{
    st->node_types = m->n_nt;
    st->classes = m->n_pc;
    st->sizes = m->ns;
    st->configs = m->n_cfg;
    st->rows = m->lp ? glp_get_num_rows(m->lp) : 0;
    st->cols = m->lp ? glp_get_num_cols(m->lp) : 0;
}

int sim_bound_milli(const struct sim_trace *t, const int *idx, int n, double *milli,
                    struct sim_bound_stats *st, struct gs_err *e)
{
    struct timespec w0;
    struct sim_bound_stats dummy;
    st = stats_start(st, &dummy, &w0);
    *milli = 0;
    struct model m = {0};
    int rc;
    if ((rc = model_classes(&m, t, idx, n, e)) == 0 && (rc = model_lp(&m, e)) == 0)
        rc = model_solve(&m, milli, &st->lp_obj, e);
    fill_stats(st, &m);
    st->solves = rc == 0;
    st->lp_milli = *milli;
    model_free(&m);
    st->elapsed_s = elapsed_since(&w0);
    return rc;
}

/* sim_bound_prefixes, with forced[i] (NULL: none) the pods every sample
 * from i on must hold. */
static int prefixes(const struct sim_trace *t, const int *idx, int first, int last,
                    const unsigned char *forced, double *unalloc_pct, struct sim_bound_stats *st,
                    struct gs_err *e)
{
    struct timespec w0;
    struct sim_bound_stats dummy;
    st = stats_start(st, &dummy, &w0);
    *unalloc_pct = NAN;
    if (t->total_gpus <= 0)
        return gs_errf(e, GS_EINVAL, "the node list has no GPUs");
    if (first < 0 || last < first)
        return gs_errf(e, GS_EINVAL, "bound: empty sample range [%d, %d]", first, last);
    const double cap = (double)t->total_gpus * CORE_MILLI;
    /* one LP per distinct prefix, from the last sample back, each step
     * taking one pod out of its class bound and re-solving from the basis */
    struct model m = {0};
    double milli = 0, sum = 0; /* sum of the samples' bounds, % */
    int rc;
    if ((rc = model_classes(&m, t, idx, last + 1, e)) < 0)
        goto out;
    for (int i = 0; forced && i <= last; i++)
        if (forced[i] && m.cls[i] >= 0)
            m.pc[m.cls[i]].lo++;
    if ((rc = model_lp(&m, e)) < 0 || (rc = model_solve(&m, &milli, &st->lp_obj, e)) < 0)
        goto out;
    st->solves = 1;
    st->lp_milli = milli;
    for (int i = last; i >= first; i--) {
        double b = 100.0 - 100.0 * milli / cap;
        sum += b > 0 ? b : 0;
        int k = m.cls[i];
        if (i == first || k < 0)
            continue;
        m.pc[k].count--;
        if (forced && forced[i])
            m.pc[k].lo--;
        set_class_row(&m, k);
        double obj;
        if ((rc = model_solve(&m, &milli, &obj, e)) < 0)
            goto out;
        st->solves++;
    }
    st->samples = last - first + 1;
    *unalloc_pct = sum / st->samples;
    st->last_pct = 100.0 - 100.0 * st->lp_milli / cap;
    if (st->last_pct < 0)
        st->last_pct = 0;
out:
    fill_stats(st, &m);
    model_free(&m);
    st->elapsed_s = elapsed_since(&w0);
    return rc;
}

int sim_bound_prefixes(const struct sim_trace *t, const int *idx, int first, int last,
                       double *unalloc_pct, struct sim_bound_stats *st, struct gs_err *e)
{
    return prefixes(t, idx, first, last, NULL, unalloc_pct, st, e);
}

int sim_bound_prefixes_wc(const struct sim_trace *t, const int *idx, int first, int last,
                          const unsigned char *forced, double *unalloc_pct,
                          struct sim_bound_stats *st, struct gs_err *e)
{
    return prefixes(t, idx, first, last, forced, unalloc_pct, st, e);
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
        struct timespec w0;
        clock_gettime(CLOCK_MONOTONIC, &w0);
        if (!(forced = malloc((size_t)last + 1))) {
            rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
            goto out;
        }
        if ((rc = sim_forced_mark(t, order, last + 1, forced, &fs, e)) < 0)
            goto out;
        double forced_s = elapsed_since(&w0);
        if ((rc = prefixes(t, order, first, last, forced, unalloc_pct, st, e)) < 0)
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
        rc = prefixes(t, order, first, last, NULL, unalloc_pct, st, e);
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
    if ((rc = sim_build_cluster(c, t, e)) < 0 ||
        (rc = core_cluster_set_workload(c, cfg->classes, cfg->n_classes, cfg->coverage, e)) < 0)
        goto out;
    core_cluster_set_seed(c, seed);
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
    struct model m = {0};
    int *keep = NULL;
    double *xs = NULL, *at = NULL, *best = NULL;
    struct off_item *items = NULL;
    double milli, obj;
    const double cap = (double)t->total_gpus * CORE_MILLI;
    if (last < 0) {
        rc = gs_errf(e, GS_EINVAL, "bound: the workload never reaches arrived 100 %%");
        goto out;
    }
    if ((rc = model_classes(&m, t, order, last + 1, e)) < 0 || (rc = model_lp(&m, e)) < 0)
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
        if ((rc = model_solve(&m, &milli, &obj, e)) < 0)
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
    model_free(&m);
    free(order);
    return rc;
}
