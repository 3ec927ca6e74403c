/*
 * sim/sim_lp.c - the LP of the bounds (sim_lp.h; the proof is in
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
 * the bounds re-solve one LP per sample of the 100 % bin and per case
 * (only class bounds change, so the simplex restarts from the last basis).
 */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "sim/sim_lp.h"
#include "util/clock.h"

static int ipush(struct sim_lp_ivec *v, int x)
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
static int enum_configs(const int *sizes, int ns, struct sim_lp_ivec *cfg)
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

void sim_lp_free(struct sim_lp *m)
{
    if (m->lp)
        glp_delete_prob(m->lp);
    free(m->nt);
    free(m->pc);
    free(m->cls);
    free(m->model_ok);
    free(m->cfg.a);
    free(m->fix);
    free(m->ind);
    free(m->val);
    free(m->u);
    memset(m, 0, sizeof *m);
}

int sim_lp_node_types(const struct sim_trace *t, struct sim_lp_type *nt)
{
    int n = 0;
    for (int i = 0; i < t->n_nodes; i++) {
        if (t->nodes[i].gpus == 0)
            continue; /* no GPU pod is ever there */
        int k = 0;
        while (k < n && !sim_node_same_shape(nt[k].n, &t->nodes[i]))
            k++;
        if (k == n)
            nt[n++] = (struct sim_lp_type){&t->nodes[i], 0};
        nt[k].count++;
    }
    return n;
}

/* Node types and pod classes of t's nodes and the pods t->pods[idx[0..n)]. */
int sim_lp_classes(struct sim_lp *m, const struct sim_trace *t, const int *idx, int n,
                   struct gs_err *e)
{
    m->nt = calloc((size_t)t->n_nodes + 1, sizeof *m->nt);
    m->pc = calloc((size_t)n + 1, sizeof *m->pc);
    m->cls = malloc(((size_t)n + 1) * sizeof *m->cls);
    if (!m->nt || !m->pc || !m->cls)
        return gs_errf(e, GS_ENOMEM, "bound: out of memory");
    m->n_nt = sim_lp_node_types(t, m->nt);
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
            m->pc[k].hi = INT_MAX;
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
    /* the core's own model match, once per class and type */
    struct core_pod *cp = calloc(1, sizeof *cp);
    if (!cp || !(m->model_ok = malloc((size_t)m->n_pc * m->n_nt + 1))) {
        free(cp);
        return gs_errf(e, GS_ENOMEM, "bound: out of memory");
    }
    for (int k = 0; k < m->n_pc; k++) {
        sim_core_pod(m->pc[k].p, 0, cp);
        for (int T = 0; T < m->n_nt; T++)
            m->model_ok[(size_t)k * m->n_nt + T] =
                (unsigned char)core_request_model_ok(&cp->req, m->nt[T].n->model);
    }
    free(cp);
    return 0;
}

/* The matrix, built through these growable triplets. */
struct triplets {
    struct sim_lp_ivec ia, ja;
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
static int add_col(struct sim_lp *m, struct sim_lp_ivec *fix, double obj, int fix_row)
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
void sim_lp_set_class_row(struct sim_lp *m, int k)
{
    const struct sim_lp_class *c = &m->pc[k];
    int up = c->count < c->hi ? c->count : c->hi;
    if (c->lo <= 0)
        glp_set_row_bnds(m->lp, 1 + k, GLP_UP, 0, up);
    else if (c->lo >= up)
        glp_set_row_bnds(m->lp, 1 + k, GLP_FX, up, up);
    else
        glp_set_row_bnds(m->lp, 1 + k, GLP_DB, c->lo, up);
}

int sim_lp_build(struct sim_lp *m, struct gs_err *e)
{
    struct triplets tr = {0};
    struct sim_lp_ivec fix = {0};
    int rc = 0;
    m->lp = glp_create_prob();
    glp_set_obj_dir(m->lp, GLP_MAX);
    /* rows: classes, then per type cpu, mem, gpu, then size rows */
    m->per_t = 3 + (m->n_cfg ? m->ns : 2);
    int n_rows = m->n_pc + m->n_nt * m->per_t;
    glp_add_rows(m->lp, n_rows);
    for (int k = 0; k < m->n_pc; k++)
        sim_lp_set_class_row(m, k);
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
        for (int T = 0; T < m->n_nt; T++) {
            const struct sim_node *nd = m->nt[T].n;
            if (p->num_gpu > nd->gpus || p->cpu_milli > nd->cpu_milli ||
                p->mem_mib > nd->mem_mib || !m->model_ok[(size_t)k * m->n_nt + T])
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
double sim_lp_certificate(struct sim_lp *m, const double *dual)
{
    glp_prob *lp = m->lp;
    int rows = glp_get_num_rows(lp), cols = glp_get_num_cols(lp);
    for (int i = 1; i <= rows; i++) {
        double d = dual ? dual[i] : glp_get_row_dual(lp, i);
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

/* Solves from the last basis and returns the certified optimum. The
 * primal simplex, warm too: after class rows change it re-solves the
 * openb LPs 3 to 8 times faster than the dual simplex (docs/benchmark.md). */
int sim_lp_solve(struct sim_lp *m, double *milli, double *lp_obj, struct gs_err *e)
{
    *milli = 0;
    *lp_obj = 0;
    if (glp_get_num_cols(m->lp) == 0)
        return 0;
    glp_smcp parm;
    glp_init_smcp(&parm);
    parm.msg_lev = GLP_MSG_OFF;
    parm.presolve = GLP_OFF;
    parm.meth = GLP_PRIMAL;
    int g = glp_simplex(m->lp, &parm);
    if (g != 0 || (glp_get_status(m->lp) != GLP_OPT && glp_get_status(m->lp) != GLP_NOFEAS)) {
        /* a fresh start from the standard basis before giving up */
        glp_std_basis(m->lp);
        g = glp_simplex(m->lp, &parm);
    }
    if (g == 0 && glp_get_status(m->lp) == GLP_NOFEAS && m->nofeas_ok)
        return 1;
    if (g == 0 && glp_get_status(m->lp) == GLP_NOFEAS)
        return gs_errf(e, GS_EINVAL, "bound: the forced pods cannot all be placed (LP "
                       "infeasible): the forcing test is wrong, no bound");
    if (g != 0 || glp_get_status(m->lp) != GLP_OPT)
        return gs_errf(e, GS_EINVAL, "bound: GLPK did not reach an optimum (code %d, status %d)",
                       g, glp_get_status(m->lp));
    *lp_obj = glp_get_obj_val(m->lp);
    *milli = sim_lp_certificate(m, NULL);
    return 0;
}

double sim_lp_pct(double milli, double cap)
{
    double b = 100.0 - 100.0 * milli / cap;
    return b > 0 ? b : 0;
}

int sim_lp_walk(struct sim_lp *m, int first, int last, double cap, double *out,
                struct sim_lp_last *at_last, int *solves, struct gs_err *e)
{
    double milli, obj;
    int rc = sim_lp_solve(m, &milli, &obj, e);
    (*solves)++;
    if (rc != 0)
        return rc;
    if (at_last) {
        at_last->milli = milli;
        at_last->obj = obj;
        for (int r = 1; at_last->dual && r <= glp_get_num_rows(m->lp); r++)
            at_last->dual[r] = glp_get_row_dual(m->lp, r);
        for (int k = 0; at_last->placed && k < m->n_pc; k++)
            at_last->placed[k] = glp_get_row_prim(m->lp, 1 + k);
    }
    for (int i = last; out && i >= first; i--) {
        out[i - first] = sim_lp_pct(milli, cap);
        int k = m->cls[i];
        if (i == first || k < 0)
            continue;
        m->pc[k].count--;
        sim_lp_set_class_row(m, k);
        if ((rc = sim_lp_solve(m, &milli, &obj, e)) != 0)
            return rc;
        (*solves)++;
    }
    return 0;
}

/* The stats a bound call fills (the caller's, or *dummy when it passed
 * none), zeroed, and the wall clock at its start. */
struct sim_bound_stats *sim_lp_stats_start(struct sim_bound_stats *st,
                                           struct sim_bound_stats *dummy, double *w0)
{
    *w0 = gs_mono_s();
    if (!st)
        st = dummy;
    memset(st, 0, sizeof *st);
    return st;
}

void sim_lp_fill_stats(struct sim_bound_stats *st, const struct sim_lp *m)
{
    st->node_types = m->n_nt;
    st->classes = m->n_pc;
    st->sizes = m->ns;
    st->configs = m->n_cfg;
    st->rows = m->lp ? glp_get_num_rows(m->lp) : 0;
    st->cols = m->lp ? glp_get_num_cols(m->lp) : 0;
}

int sim_lp_prefix_start(const struct sim_trace *t, int first, int last, double *unalloc_pct,
                        struct sim_bound_stats **st, struct sim_bound_stats *dummy,
                        double *w0, struct gs_err *e)
{
    *st = sim_lp_stats_start(*st, dummy, w0);
    *unalloc_pct = NAN;
    if (t->total_gpus <= 0)
        return gs_errf(e, GS_EINVAL, "the node list has no GPUs");
    if (first < 0 || last < first)
        return gs_errf(e, GS_EINVAL, "bound: empty sample range [%d, %d]", first, last);
    return 0;
}
