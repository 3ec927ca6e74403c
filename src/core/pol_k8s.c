/*
 * core/pol_k8s.c - the cluster policies: binpack (fill nodes and GPUs
 * first), spread (emptiest first) and topology (multi-GPU pods on GPUs
 * joined by NVLink, then one PCIe switch, then one NUMA node).
 *
 * GPU pods are scored on GPU shares after placement, CPU-only pods on CPU,
 * so a CPU-only pod does not land on an idle GPU node by accident of order.
 */
#include "core/builtin.h"
#include "core/core.h"
#include "core/internal.h"

/* Percentage of the node's GPU share (or CPU for CPU-only pods) in use after
 * placing the pod; reads the node's filter line (cy->hot). */
static int used_after_pct(const struct core_cycle *cy, const struct core_node *n)
{
    const struct core_node_hot *h = cy->hot;
    if (cy->req->kind == CORE_REQ_NONE || cy->req->kind == CORE_REQ_MIG || h->n_usable == 0) {
        if (n->cpu_milli <= 0)
            return 0;
        return (int)(100 * (n->cpu_milli - h->free_cpu + cy->req->cpu_milli) / n->cpu_milli);
    }
    int total = h->n_usable * CORE_MILLI;
    return 100 * (total - h->free_share + pol_req_total(cy, n)) / total;
}

static int binpack_score(const struct core_cycle *cy, const struct core_node *n)
{
    return used_after_pct(cy, n);
}

static int spread_score(const struct core_cycle *cy, const struct core_node *n)
{
    return CORE_MAX_SCORE - used_after_pct(cy, n);
}

static int binpack_pick(const struct core_cycle *cy, const struct core_node *n,
                        struct core_alloc *a)
{
    return core_pick_order(cy, n, a, cy->req->kind == CORE_REQ_WHOLE ? 0 : 1);
}

static int spread_pick(const struct core_cycle *cy, const struct core_node *n,
                       struct core_alloc *a)
{
    return core_pick_order(cy, n, a, cy->req->kind == CORE_REQ_WHOLE ? 0 : -1);
}

const struct core_policy core_policy_binpack = {
    "binpack", "most used node and GPU first: keeps whole nodes free for big jobs",
    0, binpack_score, NULL, binpack_pick,
};

const struct core_policy core_policy_spread = {
    "spread", "least used node and GPU first: spreads load and failure impact",
    0, spread_score, NULL, spread_pick,
};

/* ---- topology --------------------------------------------------------- */

static uint32_t fitting_mask(const struct core_cycle *cy, const struct core_node *n)
{
    uint32_t m = 0;
    for (int i = 0; i < n->n_gpus; i++)
        if (core_fits_pos(cy, n, i))
            m |= 1u << i;
    return m;
}

/* Multi-GPU pods: the weakest link of the best set, scaled to 0..100
 * (NVLink 100, one PCIe switch 83, ... across NUMA 16); others: binpack. */
static int topology_score(const struct core_cycle *cy, const struct core_node *n)
{
    const struct core_request *r = cy->req;
    if ((r->kind != CORE_REQ_WHOLE && r->kind != CORE_REQ_SHARED) || r->num_gpu < 2)
        return used_after_pct(cy, n);
    uint32_t set;
    if (core_topology_pick(n, fitting_mask(cy, n), 0, r->num_gpu, &set) < 0)
        return 0;
    int weakest = CORE_LINK_NVLINK;
    for (int a = 0; a < n->n_gpus; a++)
        for (int b = a + 1; b < n->n_gpus; b++)
            if ((set >> a & 1) && (set >> b & 1) && n->gpus[a].link[b] < weakest)
                weakest = n->gpus[a].link[b];
    return weakest * CORE_MAX_SCORE / CORE_LINK_NVLINK;
}

static int topology_pick(const struct core_cycle *cy, const struct core_node *n,
                         struct core_alloc *a)
{
    const struct core_request *r = cy->req;
    if (r->num_gpu < 2 || r->kind == CORE_REQ_WHOLE) /* whole: linked already */
        return core_pick_order(cy, n, a, r->kind == CORE_REQ_WHOLE ? 0 : 1);
    uint32_t set;
    if (core_topology_pick(n, fitting_mask(cy, n), 0, r->num_gpu, &set) < 0)
        return -GS_ENOFIT;
    core_alloc_init(cy, n, a);
    for (int i = 0; i < n->n_gpus; i++)
        if (set & (1u << i))
            core_alloc_add_gpu(cy, n, a, i);
    return 0;
}

const struct core_policy core_policy_topology = {
    "topology", "multi-GPU pods on NVLink-joined GPUs, then one PCIe switch, then one NUMA node",
    0, topology_score, NULL, topology_pick,
};
