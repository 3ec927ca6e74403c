/*
 * core/policy.h - scoring policies and their registry, for callers that pick
 * a policy by name and for whoever writes a new one.
 *
 * A policy is one row of data (the k8s score plugin as C): a raw per-node
 * score, an optional normalisation over the nodes that fit, and an optional
 * GPU-level choice. Built-in: random, dotprod, clustering, packing, bestfit,
 * fgd (exactly as the openb benchmark defines them), binpack, spread,
 * topology. A new policy is a `static const struct core_policy` plus either a
 * row in the built-in table (core/registry.c) or a core_policy_register()
 * call at start-up; core_policy_at() lists it, so `simulate --policy NAME`
 * and `--list-policies` see it.
 *
 * Ownership: policies are static data; the registry only keeps pointers.
 */
#ifndef GPUSCHED_CORE_POLICY_H
#define GPUSCHED_CORE_POLICY_H

#include <stdint.h>

#include "core/cluster.h"
#include "core/request.h"
#include "util/err.h"

/* Per-decision state (the k8s CycleState): written once before filtering,
 * then only read by filters and scores. */
struct core_node_hot;

struct core_cycle {
    struct core_cluster *cluster;
    const struct core_pod *pod;
    const struct core_request *req;
    const struct core_policy *pol;
    uint64_t model_mask;       /* cluster model ids the pod may use */
    int tag;                   /* clustering tag: CORE_TAG_* */
    uint64_t *rng;             /* the cluster's seeded stream (random policy) */
    uint64_t pod_hash;         /* of what NODE_STATE scores depend on */
    /* private to the core: the filter line of the node being scored, so
     * cheap scores need not touch the node */
    const struct core_node_hot *hot;
    int tainted;               /* a feasible node has taints: 1, 0, -1 unknown */
};

/* Clustering tags: a sharing pod, a MIG pod, or k whole/shared GPUs (1..16). */
#define CORE_TAG_NONE 0        /* CPU-only pod */
#define CORE_TAG_SHARE (CORE_MAX_GPUS + 1)
#define CORE_TAG_MIG (CORE_MAX_GPUS + 2)
#define CORE_NTAGS (CORE_MAX_GPUS + 3)

enum core_policy_flags {
    /* score depends only on the node's free state (models, free CPU, per-GPU
     * free shares, pod tags), the pod's request, the target workload M and
     * the cluster's GPUs per model: the framework caches it across nodes and
     * decisions (worth it for costly scores) */
    CORE_POLICY_NODE_STATE = 1 << 0,
    /* the node-level choice is uniform over the nodes that fit */
    CORE_POLICY_RANDOM_NODE = 1 << 1,
};

struct core_policy {
    const char *name;
    const char *summary;       /* one line for --list-policies / docs */
    unsigned flags;
    /* raw score of a node the pod fits on; 0..100 unless normalize is set */
    int (*score)(const struct core_cycle *cy, const struct core_node *n);
    /* optional: rescale raw scores of the n feasible nodes to 0..100 in place */
    void (*normalize)(const struct core_cycle *cy, int *scores, int n);
    /* optional GPU-level choice; NULL = core_pick_default. Returns 0 or
     * -GS_ENOFIT. */
    int (*pick_gpus)(const struct core_cycle *cy, const struct core_node *n, struct core_alloc *a);
};

/* Registry. find: NULL if unknown. Names are unique. */
const struct core_policy *core_policy_find(const char *name);
int core_policy_count(void);
const struct core_policy *core_policy_at(int i);
/* find, or NULL and -GS_EINVAL in *e naming `field` and listing the known
 * policies. */
const struct core_policy *core_policy_need(const char *name, const char *field, struct gs_err *e);
/* Adds a policy at start-up (not thread-safe). -GS_ECONFLICT on a duplicate
 * name, -GS_EINVAL without name or score, -GS_ETOOBIG when full. */
int core_policy_register(const struct core_policy *p, struct gs_err *e);

/* ---- helpers for policy writers ---- */

/* A GPU's free compute share (see core.h): min(free_milli, floor(1000 *
 * free_mem / mem)). */
int core_gpu_free_share(const struct core_gpu *g);
/* What pods hold of GPU g: memory (MiB) and compute (thousandths), the
 * used MIG instances' included (an instance's compute counted as its share
 * of the GPU's memory), for reports and metrics. */
int64_t core_gpu_mem_used(const struct core_gpu *g);
int core_gpu_milli_used(const struct core_gpu *g);
/* Whether a pod that is not a MIG pod holds GPU g (one placed before the
 * GPU went into MIG mode): its MIG instances are not to be handed out. */
int core_gpu_held_whole(const struct core_gpu *g);
/* The pod's compute share on GPU g: WHOLE 1000, SHARED max(milli, ceil(1000 *
 * mem_mib / g->mem_mib)) but at most g's free share, else 0. */
int core_pod_share(const struct core_cycle *cy, const struct core_gpu *g);
/* Can this GPU take the pod's per-GPU request now (healthy, model allowed,
 * memory and compute fit; WHOLE: entirely free)? */
int core_gpu_fits(const struct core_cycle *cy, const struct core_gpu *g);
/* Sum of core_gpu_free_share over the node's healthy non-MIG GPUs. */
int core_node_free_share(const struct core_node *n);

/* Default GPU choice: WHOLE lowest-index fitting GPUs; SHARED best fit (the
 * fitting GPUs with the least free share, lowest index on ties); MIG free
 * instances of the profile. Fills a (including pod identity and node). */
int core_pick_default(const struct core_cycle *cy, const struct core_node *n,
                      struct core_alloc *a);
/* Fills the pod/node/host parts of an allocation and sets a->n = 0; the
 * pickers then add GPUs with core_alloc_add_gpu. */
void core_alloc_init(const struct core_cycle *cy, const struct core_node *n,
                     struct core_alloc *a);
void core_alloc_add_gpu(const struct core_cycle *cy, const struct core_node *n,
                        struct core_alloc *a, int pos);

/* Uniform integer in [0, n) from the cluster's seeded stream. */
uint64_t core_rand(const struct core_cycle *cy, uint64_t n);

#endif
