/*
 * core/pol_fgd.c - Fragmentation Gradient Descent (Weng et al., ATC'23):
 * place the pod where the node's expected fragmentation F_n(M) grows least.
 *
 * Score = floor(100 * sigmoid(-delta / 1000)), delta = F_after - F_before in
 * milli-GPU. A sharing pod (one GPU, a share below 1000) tries every GPU it
 * fits on; the node scores its best GPU, which is also the GPU it gets (first
 * index on ties). Other pods take CPU and the fitting GPUs with the least
 * free share; whole-GPU pods then get the lowest-index free GPUs, as in the
 * benchmark.
 */
#include <math.h>

#include "core/builtin.h"
#include "core/core.h"
#include "core/internal.h"

static int sharing(const struct core_request *r)
{
    return r->kind == CORE_REQ_SHARED && r->num_gpu == 1;
}

static int delta_score(double delta)
{
    return (int)floor(100.0 / (1.0 + exp(delta / 1000.0)));
}

/* Score of the node; for sharing pods *best_pos is the GPU that earns it. */
static int fgd_eval(const struct core_cycle *cy, const struct core_node *n, int *best_pos)
{
    struct core_cluster *c = cy->cluster;
    const struct core_node_priv *p = n->priv;
    double before = core_node_frag(c, n);
    int64_t cpu_after = n->free_cpu_milli - cy->req->cpu_milli;
    int pos[CORE_MAX_GPUS], take[CORE_MAX_GPUS], k = 0;

    *best_pos = -1;
    if (sharing(cy->req)) {
        int best = -1, tried[CORE_MAX_GPUS], n_tried = 0, tried_score[CORE_MAX_GPUS];
        for (int i = 0; i < n->n_gpus; i++) {
            if (!core_fits_pos(cy, n, i))
                continue;
            int s = -1;
            /* on a one-model node, GPUs with equal free shares score alike */
            for (int t = 0; p->homogeneous && t < n_tried; t++)
                if (p->share[tried[t]] == p->share[i])
                    s = tried_score[t];
            if (s < 0) {
                int one = core_pod_share(cy, &n->gpus[i]);
                s = delta_score(core_frag_after(c, n, cpu_after, &i, &one, 1) - before);
                tried[n_tried] = i;
                tried_score[n_tried++] = s;
            }
            if (s > best) {
                best = s;
                *best_pos = i;
            }
        }
        return best < 0 ? 0 : best;
    }
    if (cy->req->kind == CORE_REQ_WHOLE || cy->req->kind == CORE_REQ_SHARED) {
        k = core_least_free_fitting(cy, n, pos);
        for (int i = 0; i < k; i++)
            take[i] = core_pod_share(cy, &n->gpus[pos[i]]);
    }
    return delta_score(core_frag_after(c, n, cpu_after, pos, take, k) - before);
}

static int fgd_score(const struct core_cycle *cy, const struct core_node *n)
{
    int pos;
    return fgd_eval(cy, n, &pos);
}

static int fgd_pick(const struct core_cycle *cy, const struct core_node *n, struct core_alloc *a)
{
    if (!sharing(cy->req))
        return cy->req->kind == CORE_REQ_WHOLE ? core_pick_order(cy, n, a, 0)
                                               : core_pick_order(cy, n, a, 1);
    int pos;
    fgd_eval(cy, n, &pos);
    if (pos < 0)
        return -GS_ENOFIT;
    core_alloc_init(cy, n, a);
    core_alloc_add_gpu(cy, n, a, pos);
    return 0;
}

const struct core_policy core_policy_fgd = {
    "fgd", "fragmentation gradient descent: least growth of expected fragmentation (ATC'23)",
    CORE_POLICY_NODE_STATE, fgd_score, NULL, fgd_pick,
};
