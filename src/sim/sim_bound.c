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
 */
#include <glpk.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "sim/sim_bound.h"

struct ntype {
    const struct sim_node *n; /* representative */
    int count;
};

struct pclass {
    const struct sim_pod *p;  /* representative */
    int count, size;          /* size: index into sizes[], -1 for whole GPUs */
};

static int same_node(const struct sim_node *a, const struct sim_node *b)
{
    return a->gpus == b->gpus && a->cpu_milli == b->cpu_milli && a->mem_mib == b->mem_mib &&
           strcmp(a->model, b->model) == 0;
}

static int same_pod(const struct sim_pod *a, const struct sim_pod *b)
{
    return a->num_gpu == b->num_gpu && a->gpu_milli == b->gpu_milli &&
           a->cpu_milli == b->cpu_milli && a->mem_mib == b->mem_mib &&
           strcmp(a->gpu_spec, b->gpu_spec) == 0;
}

/* Growable arrays of ints and doubles for the configurations and matrix. */
struct ivec {
    int *a;
    size_t n, cap;
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

int sim_bound_milli(const struct sim_trace *t, const int *idx, int n, double *milli,
                    struct sim_bound_stats *st, struct gs_err *e)
{
    struct timespec w0, w1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    struct sim_bound_stats dummy;
    if (!st)
        st = &dummy;
    memset(st, 0, sizeof *st);
    *milli = 0;
    struct ntype *nt = calloc((size_t)t->n_nodes + 1, sizeof *nt);
    struct pclass *pc = calloc((size_t)n + 1, sizeof *pc);
    struct core_pod *cp = calloc(1, sizeof *cp);
    struct ivec cfg = {0}, ia = {0}, ja = {0};
    double *ar = NULL;
    size_t ar_cap = 0;
    glp_prob *lp = NULL;
    int rc = 0, n_nt = 0, n_pc = 0, sizes[64], ns = 0;
    if (!nt || !pc || !cp) {
        rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
        goto out;
    }
    for (int i = 0; i < t->n_nodes; i++) {
        if (t->nodes[i].gpus == 0)
            continue;
        int k = 0;
        while (k < n_nt && !same_node(nt[k].n, &t->nodes[i]))
            k++;
        if (k == n_nt)
            nt[n_nt++].n = &t->nodes[i];
        nt[k].count++;
    }
    for (int i = 0; i < n; i++) {
        const struct sim_pod *p = &t->pods[idx[i]];
        if (p->num_gpu == 0)
            continue;
        int k = 0;
        while (k < n_pc && !same_pod(pc[k].p, p))
            k++;
        if (k == n_pc) {
            pc[n_pc].p = p;
            pc[n_pc].size = -1;
            if (p->gpu_milli < CORE_MILLI) {
                int s = 0;
                while (s < ns && sizes[s] != p->gpu_milli)
                    s++;
                if (s == ns) {
                    if (ns == 64) {
                        rc = gs_errf(e, GS_EINVAL, "bound: more than 64 sharing sizes");
                        goto out;
                    }
                    sizes[ns++] = p->gpu_milli;
                }
            }
            n_pc++;
        }
        pc[k].count++;
    }
    /* sizes ascending; classes point at their size */
    for (int a = 1; a < ns; a++)
        for (int b = a; b > 0 && sizes[b - 1] > sizes[b]; b--) {
            int x = sizes[b];
            sizes[b] = sizes[b - 1];
            sizes[b - 1] = x;
        }
    for (int k = 0; k < n_pc; k++)
        if (pc[k].p->gpu_milli < CORE_MILLI)
            for (int s = 0; s < ns; s++)
                if (sizes[s] == pc[k].p->gpu_milli)
                    pc[k].size = s;
    int n_cfg = 0;
    if (ns > 0) {
        n_cfg = enum_configs(sizes, ns, &cfg);
        if (n_cfg == -1) {
            rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");
            goto out;
        }
        if (n_cfg == -2)
            n_cfg = 0; /* too many: the capacity cut */
    }
    st->node_types = n_nt;
    st->classes = n_pc;
    st->sizes = ns;
    st->configs = n_cfg;

    lp = glp_create_prob();
    glp_set_obj_dir(lp, GLP_MAX);
    /* rows: classes, then per type cpu, mem, gpu, then size rows */
    const int per_t = 3 + (n_cfg ? ns : 2);
    int n_rows = n_pc + n_nt * per_t;
    glp_add_rows(lp, n_rows);
    for (int k = 0; k < n_pc; k++)
        glp_set_row_bnds(lp, 1 + k, GLP_UP, 0, pc[k].count);
    for (int T = 0; T < n_nt; T++) {
        int base = 1 + n_pc + T * per_t;
        const struct sim_node *nd = nt[T].n;
        glp_set_row_bnds(lp, base, GLP_UP, 0, (double)nt[T].count * (double)nd->cpu_milli);
        glp_set_row_bnds(lp, base + 1, GLP_UP, 0, (double)nt[T].count * (double)nd->mem_mib);
        glp_set_row_bnds(lp, base + 2, GLP_UP, 0, (double)nt[T].count * nd->gpus);
        for (int r = 3; r < per_t; r++)
            glp_set_row_bnds(lp, base + r, GLP_UP, 0, 0);
    }
    /* matrix entries go through these */
#define ENTRY(row, col, val)                                                                  \
    do {                                                                                      \
        if (ia.n + 1 >= ar_cap) {                                                             \
            size_t nc = ar_cap ? 2 * ar_cap : 4096;                                           \
            double *na = realloc(ar, nc * sizeof *na);                                        \
            if (!na) {                                                                        \
                rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");                           \
                goto out;                                                                     \
            }                                                                                 \
            ar = na;                                                                          \
            ar_cap = nc;                                                                      \
        }                                                                                     \
        if (ia.n == 0 && (ipush(&ia, 0) < 0 || ipush(&ja, 0) < 0)) {                          \
            rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");                               \
            goto out;                                                                         \
        }                                                                                     \
        ar[ia.n] = (val);                                                                     \
        if (ipush(&ia, (row)) < 0 || ipush(&ja, (col)) < 0) {                                 \
            rc = gs_errf(e, GS_ENOMEM, "bound: out of memory");                               \
            goto out;                                                                         \
        }                                                                                     \
    } while (0)
    int col = 0;
    for (int k = 0; k < n_pc; k++) {
        const struct sim_pod *p = pc[k].p;
        sim_core_pod(p, 0, cp);
        for (int T = 0; T < n_nt; T++) {
            const struct sim_node *nd = nt[T].n;
            if (p->num_gpu > nd->gpus || p->cpu_milli > nd->cpu_milli ||
                p->mem_mib > nd->mem_mib || !core_request_model_ok(&cp->req, nd->model))
                continue;
            int base = 1 + n_pc + T * per_t;
            col = glp_add_cols(lp, 1);
            glp_set_col_bnds(lp, col, GLP_LO, 0, 0);
            glp_set_obj_coef(lp, col, (double)p->num_gpu * p->gpu_milli);
            ENTRY(1 + k, col, 1);
            if (p->cpu_milli)
                ENTRY(base, col, (double)p->cpu_milli);
            if (p->mem_mib)
                ENTRY(base + 1, col, (double)p->mem_mib);
            if (pc[k].size < 0) {
                ENTRY(base + 2, col, p->num_gpu);
            } else if (n_cfg) {
                ENTRY(base + 3 + pc[k].size, col, 1);
            } else {
                ENTRY(base + 3, col, p->gpu_milli);
                if (p->gpu_milli > CORE_MILLI / 2)
                    ENTRY(base + 4, col, 1);
            }
        }
    }
    /* sharing GPUs of each type: configurations, or one capacity column */
    for (int T = 0; T < n_nt && ns > 0; T++) {
        int base = 1 + n_pc + T * per_t;
        if (n_cfg) {
            for (int q = 0; q < n_cfg; q++) {
                col = glp_add_cols(lp, 1);
                glp_set_col_bnds(lp, col, GLP_LO, 0, 0);
                ENTRY(base + 2, col, 1);
                for (int s = 0; s < ns; s++)
                    if (cfg.a[(size_t)q * ns + s])
                        ENTRY(base + 3 + s, col, -(double)cfg.a[(size_t)q * ns + s]);
            }
        } else {
            col = glp_add_cols(lp, 1);
            glp_set_col_bnds(lp, col, GLP_LO, 0, 0);
            ENTRY(base + 2, col, 1);
            ENTRY(base + 3, col, -(double)CORE_MILLI);
            ENTRY(base + 4, col, -1);
        }
    }
#undef ENTRY
    st->rows = n_rows;
    st->cols = glp_get_num_cols(lp);
    if (st->cols > 0) {
        glp_load_matrix(lp, (int)ia.n - 1, ia.a, ja.a, ar);
        glp_smcp parm;
        glp_init_smcp(&parm);
        parm.msg_lev = GLP_MSG_OFF;
        parm.presolve = GLP_OFF;
        int g = glp_simplex(lp, &parm);
        if (g == 0)
            g = glp_exact(lp, &parm); /* rational arithmetic from the optimal basis */
        if (g != 0 || glp_get_status(lp) != GLP_OPT) {
            rc = gs_errf(e, GS_EINVAL, "bound: GLPK did not reach an optimum (code %d, status %d)",
                         g, glp_get_status(lp));
            goto out;
        }
        *milli = glp_get_obj_val(lp);
    }
    st->lp_milli = *milli;
out:
    if (lp)
        glp_delete_prob(lp);
    free(nt);
    free(pc);
    free(cp);
    free(cfg.a);
    free(ia.a);
    free(ja.a);
    free(ar);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    st->elapsed_s = (double)(w1.tv_sec - w0.tv_sec) + (double)(w1.tv_nsec - w0.tv_nsec) / 1e9;
    return rc;
}

int sim_bound_run(const struct sim_config *cfg, uint64_t seed, double *unalloc_pct,
                  struct sim_bound_stats *st, struct gs_err *e)
{
    const struct sim_trace *t = cfg->trace;
    *unalloc_pct = NAN;
    if (t->total_gpus <= 0)
        return gs_errf(e, GS_EINVAL, "the node list has no GPUs");
    int *order, len, rc;
    if ((rc = sim_order(cfg, seed, &order, &len, e)) < 0)
        return rc;
    const double cap = (double)t->total_gpus * CORE_MILLI;
    double arrived = 0;
    int last_in = -1, last_near = -1;
    for (int i = 0; i < len; i++) {
        const struct sim_pod *p = &t->pods[order[i]];
        arrived += (double)p->num_gpu * p->gpu_milli;
        double a = 100.0 * arrived / cap;
        if (lround(a) == 100)
            last_in = i;
        if (fabs(a - 100.0) <= 1.0)
            last_near = i;
    }
    int upto = last_in >= 0 ? last_in : last_near;
    if (upto < 0) {
        free(order);
        return gs_errf(e, GS_EINVAL, "bound: the workload never reaches arrived 100 %%");
    }
    double milli;
    rc = sim_bound_milli(t, order, upto + 1, &milli, st, e);
    free(order);
    if (rc < 0)
        return rc;
    double u = 100.0 - 100.0 * milli / cap;
    *unalloc_pct = u > 0 ? u : 0;
    return 0;
}
