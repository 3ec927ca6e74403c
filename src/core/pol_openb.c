/*
 * core/pol_openb.c - the five baseline policies of the openb benchmark
 * (Weng et al., ATC'23; docs/benchmark.md §3): random, dotprod, clustering,
 * packing, bestfit. Formulas, normalisers and integer truncation follow the
 * benchmark exactly; GPU quantities are compute shares (core.h), which for
 * the trace's pods are their gpu_milli.
 */
#include <math.h>

#include "core/core.h"
#include "core/internal.h"
#include "core/builtin.h"

#define MAX_CPU 128000.0 /* the benchmark's normalisers */
#define MAX_GPU 8000.0

/* The pod's total GPU share on this node (num_gpu x share on the first GPU
 * it may use; nodes are homogeneous in practice). */
int pol_req_total(const struct core_cycle *cy, const struct core_node *n)
{
    const struct core_request *r = cy->req;
    if (r->kind != CORE_REQ_WHOLE && r->kind != CORE_REQ_SHARED)
        return 0;
    if (r->kind == CORE_REQ_WHOLE || r->mem_mib == 0) /* the same on every GPU */
        return r->num_gpu * (r->kind == CORE_REQ_WHOLE ? CORE_MILLI : r->milli);
    for (int i = 0; i < n->n_gpus; i++)
        if (n->priv->usable[i] && ((cy->model_mask >> n->gpus[i].model_id) & 1))
            return r->num_gpu * core_pod_share(cy, &n->gpus[i]);
    return r->num_gpu * (r->kind == CORE_REQ_WHOLE ? CORE_MILLI : r->milli);
}

/* ---- random ----------------------------------------------------------- */

static int random_score(const struct core_cycle *cy, const struct core_node *n)
{
    (void)n;
    return (int)core_rand(cy, CORE_MAX_SCORE + 1);
}

/* Whole GPUs: the lowest-index free ones; sharing pods: a uniformly random
 * fitting GPU (for several shared GPUs, a random subset). */
static int random_pick(const struct core_cycle *cy, const struct core_node *n,
                       struct core_alloc *a)
{
    if (cy->req->kind == CORE_REQ_WHOLE)
        return core_pick_order(cy, n, a, 0);
    int pos[CORE_MAX_GPUS], k = 0;
    for (int i = 0; i < n->n_gpus; i++)
        if (core_fits_pos(cy, n, i))
            pos[k++] = i;
    if (k < cy->req->num_gpu)
        return -GS_ENOFIT;
    core_alloc_init(cy, n, a);
    for (int i = 0; i < cy->req->num_gpu; i++) {
        int j = i + (int)core_rand(cy, (uint64_t)(k - i));
        int t = pos[i];
        pos[i] = pos[j];
        pos[j] = t;
        core_alloc_add_gpu(cy, n, a, pos[i]);
    }
    return 0;
}

const struct core_policy core_policy_random = {
    "random", "a uniformly random feasible node, random fitting GPU (openb baseline)",
    CORE_POLICY_RANDOM_NODE, random_score, NULL, random_pick,
};

/* ---- dotprod ---------------------------------------------------------- */

static int dotprod_score(const struct core_cycle *cy, const struct core_node *n)
{
    double cpu = (double)cy->hot->free_cpu / MAX_CPU * ((double)cy->req->cpu_milli / MAX_CPU);
    double gpu = (double)cy->hot->free_share / MAX_GPU * ((double)pol_req_total(cy, n) / MAX_GPU);
    return (int)floor(100.0 * (1.0 - 0.5 * (cpu + gpu)));
}

const struct core_policy core_policy_dotprod = {
    "dotprod", "smallest dot product of free resources and request (openb baseline)",
    0, dotprod_score, NULL, NULL,
};

/* ---- clustering ------------------------------------------------------- */

static int clustering_score(const struct core_cycle *cy, const struct core_node *n)
{
    if (cy->req->kind == CORE_REQ_NONE)
        return 0;
    const int *tc = n->priv->tag_count;
    int mine = tc[cy->tag] > 0, others = 0;
    for (int t = 1; t < CORE_NTAGS; t++)
        if (t != cy->tag && tc[t] > 0)
            others = 1;
    int base = 25 * ((int)MAX_GPU - n->priv->free_share) / (int)MAX_GPU;
    if (base < 0)
        base = 0;
    if (mine && !others)
        return base + 75;
    if (mine)
        return base + 50;
    if (!others)
        return base + 25;
    return base;
}

const struct core_policy core_policy_clustering = {
    "clustering", "pods of the same GPU shape together (openb GpuClustering baseline)",
    0, clustering_score, NULL, NULL,
};

/* ---- packing ---------------------------------------------------------- */

static int packing_score(const struct core_cycle *cy, const struct core_node *n)
{
    const struct core_request *r = cy->req;
    const struct core_node_priv *p = n->priv;
    if (r->kind == CORE_REQ_NONE || r->kind == CORE_REQ_MIG)
        return 0;
    int usable = 0, all_free = 1;
    int pos[CORE_MAX_GPUS], k = 0;
    for (int i = 0; i < n->n_gpus; i++) {
        if (!p->usable[i])
            continue;
        usable++;
        all_free &= p->share[i] == CORE_MILLI;
        if (core_fits_pos(cy, n, i))
            pos[k++] = i;
    }
    if (all_free)
        return usable > 33 - usable ? usable : 33 - usable;
    /* least free first */
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && p->share[pos[j]] < p->share[pos[j - 1]]; j--) {
            int t = pos[j];
            pos[j] = pos[j - 1];
            pos[j - 1] = t;
        }
    int full_used = 0, pct = 0;
    for (int i = 0; i < r->num_gpu && i < k; i++) {
        full_used += p->share[pos[i]] == CORE_MILLI;
        pct += 100 * p->share[pos[i]] / CORE_MILLI;
    }
    if (full_used > 0)
        return 50 - full_used > 33 ? 50 - full_used : 33;
    return 100 - pct / 10 > 50 ? 100 - pct / 10 : 50;
}

const struct core_policy core_policy_packing = {
    "packing", "fill partly used GPUs first, then nodes already in use (openb GpuPacking)",
    CORE_POLICY_NODE_STATE, packing_score, NULL, NULL,
};

/* ---- bestfit ---------------------------------------------------------- */

static int bestfit_score(const struct core_cycle *cy, const struct core_node *n)
{
    double cpu = (double)(cy->hot->free_cpu - cy->req->cpu_milli) / MAX_CPU;
    double gpu = (double)(cy->hot->free_share - pol_req_total(cy, n)) / MAX_GPU;
    return (int)floor(100.0 * (1.0 - (0.5 * cpu + 0.5 * gpu)));
}

void pol_range(const int *s, int n, int *lo, int *hi)
{
    *lo = *hi = s[0];
    for (int i = 1; i < n; i++) {
        if (s[i] < *lo)
            *lo = s[i];
        if (s[i] > *hi)
            *hi = s[i];
    }
}

/* Min-max rescale to 0..100 in integers; all equal -> all 0. */
void pol_minmax(const struct core_cycle *cy, int *s, int n)
{
    (void)cy;
    int lo, hi;
    pol_range(s, n, &lo, &hi);
    for (int i = 0; i < n; i++)
        s[i] = hi == lo ? 0 : (int)((int64_t)(s[i] - lo) * CORE_MAX_SCORE / (hi - lo));
}

const struct core_policy core_policy_bestfit = {
    "bestfit", "least free CPU and GPU left after placement (openb BestFit)",
    0, bestfit_score, pol_minmax, NULL,
};
