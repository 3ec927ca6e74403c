/*
 * core/internal.h - private to src/core: the cluster's own bookkeeping
 * (hash indexes, cached per-node state, the target workload, decision
 * scratch space). Nothing outside src/core includes this.
 */
#ifndef GPUSCHED_CORE_INTERNAL_H
#define GPUSCHED_CORE_INTERNAL_H

#include <stdint.h>

#include "core/cluster.h"
#include "core/core.h"
#include "core/policy.h"

/* A node's state as the NODE_STATE policies see it; equal keys score alike. */
struct core_node_key {
    int64_t free_cpu;
    int64_t gpu_mem;           /* memory of the first usable GPU (shares) */
    uint64_t model_mask;       /* models of the node's usable GPUs */
    uint32_t tags;             /* bit t set: the node holds a pod with tag t */
    int n_usable;
    int share[CORE_MAX_GPUS];  /* free shares of usable GPUs, sorted ascending */
    /* the same GPUs' free compute and memory apart (compute << 11 | memory,
     * thousandths, sorted): which GPUs a pod asking one and not the other,
     * or both, fits, which the share (the smaller) does not say */
    int split[CORE_MAX_GPUS];
};

/* What the filters need of a node, packed in one cache line and kept in a
 * dense array (cluster->hot[pos]) so that a decision over thousands of
 * nodes mostly reads contiguous memory. */
struct core_node_hot {
    int64_t free_cpu, free_mem;
    uint64_t model_mask;       /* models of usable GPUs */
    int32_t pods_left;         /* INT32_MAX when unlimited */
    int32_t free_share;        /* sum of usable GPUs' free shares */
    uint32_t rank;             /* the node's seeded tie-break rank */
    int16_t n_usable, n_whole, max_free_milli;
    uint8_t available, tainted;
    uint64_t key_serial;       /* the node key's serial (core_node_priv); 0: none */
};

struct core_node_priv {
    /* first: what scoring reads for every feasible node */
    int free_share;            /* sum of share[] */
    int n_usable;              /* healthy GPUs not in MIG mode */
    int homogeneous;           /* every usable GPU has the same model */
    uint32_t rank;             /* seeded tie-break order, lower wins */
    int link_alike;            /* the link between every two GPUs, or -1 (mixed) */
    uint64_t link_hash;        /* of the GPU count and link matrix; never 0 */
    uint32_t whole_mask;       /* usable GPUs entirely free, by position */
    int link_best;             /* the strongest link between two GPUs (0: < 2 GPUs) */
    uint64_t key_hash;
    uint64_t model_mask;
    int n_whole;               /* usable GPUs entirely free (no pod at all) */
    int max_free_milli;        /* largest free compute on a usable GPU */
    int pos;                   /* position in cluster->nodes and ->hot */
    int share[CORE_MAX_GPUS];  /* core_gpu_free_share per position (0 if unusable) */
    int usable[CORE_MAX_GPUS]; /* healthy and not in MIG mode */
    /* per position, so fit checks need not touch struct core_gpu */
    int16_t gfree[CORE_MAX_GPUS];  /* free_milli */
    uint8_t gwhole[CORE_MAX_GPUS]; /* entirely free: a whole-GPU pod fits */
    uint8_t gmodel[CORE_MAX_GPUS]; /* model_id */
    int tag_count[CORE_NTAGS];
    struct core_node_key key;
    /* the key's serial: a number given to one key content only, ever, so
     * equal serials are equal keys (equal keys mostly share one; see
     * core_key_slot); 0 for a node of several models, which the score
     * cache does not take */
    uint64_t key_serial;
    double frag;               /* F_n(M), valid when frag_wver == cluster wver */
    uint64_t frag_wver;
    /* per class m of M, with the frag: usable GPUs of an allowed model with
     * share >= m's milli (cnt), and the share of all other usable GPUs
     * (small); lets fgd price a placement in O(|M|) per changed GPU */
    int *fc_cnt, *fc_small;
    int fc_cap;
    struct core_alloc_rec *allocs; /* the node's allocations, a list (see below) */
};

/* An allocation as the cluster holds it: c->allocs[] point at a (so the
 * record is freed through them), and each node lists its own, so work on
 * one node (an update, a removal, preemption) does not scan the cluster's. */
struct core_alloc_rec {
    struct core_alloc a;       /* first */
    struct core_alloc_rec *prev, *next;
};

/* One class of the target workload, resolved against the cluster's models. */
struct core_wclass {
    int64_t cpu_milli;
    int num_gpu, milli;
    uint64_t model_mask;       /* allowed models; all ones = any */
    double p;                  /* popularity, sums to 1 over kept classes */
};


/* What a NODE_STATE score depends on besides the node's key. */
struct core_pod_key {
    int64_t cpu_milli, mem_mib;
    uint64_t model_mask;
    int32_t kind, num_gpu, milli, tag;
};

/* Node keys seen lately, direct-mapped by key hash: a node whose key is in
 * its slot takes that key's serial, any other puts its key there with a
 * new serial (cluster->key_seq). A key pushed out and seen again gets a
 * new serial: only sharing is lost, never exactness. */
struct core_key_slot {
    struct core_node_key key;
    uint64_t serial;           /* 0: empty */
};
#define CORE_KEY_SLOTS (1 << 14)

/* Score cache of NODE_STATE policies across decisions: direct-mapped,
 * keyed by the node key (by its serial: equal serials are equal keys, and
 * a decision reads the serial from the node's hot line without touching
 * the node), pod key, policy, workload version and the cluster's per-model
 * capacity version, so an entry is only ever reused for an identical
 * question. */
struct core_memo_slot {
    uint64_t node;             /* the node key's serial */
    struct core_pod_key pod;
    const struct core_policy *pol;
    uint64_t hash;             /* of node and pod key: most mismatches end here */
    uint64_t wver, cap_ver;
    int score, valid;
};
#define CORE_MEMO_SLOTS (1 << 18)

/* Score columns of NODE_STATE policies, in front of the score cache: for
 * each of the last CORE_COLS questions (pod key, policy, workload and
 * capacity versions), the raw score of every node position, stamped with
 * the node's state stamp when it was scored. A node's stamp is renewed on
 * every change of the node (cluster->stamps, unique over the cluster's
 * life), so a matching stamp means the same node in the same state. A
 * decision reads its column in node order, next to the filter lines, and
 * scores only the nodes that changed since the same question was asked. */
struct core_col_entry {
    uint64_t stamp;            /* 0: empty (stamps start at 1) */
    int32_t score;
};
struct core_score_col {
    struct core_pod_key pod;
    const struct core_policy *pol;
    uint64_t pod_hash, wver, cap_ver;
    uint64_t used;             /* cluster->col_tick of the last use; 0 never */
    int cap;                   /* entries in e */
    struct core_col_entry *e;  /* by node position */
};
#define CORE_COLS 256

struct core_cluster {
    struct core_node **nodes;
    int n_nodes, cap_nodes;
    int *node_index;           /* open addressing: node position + 1, 0 empty */
    int node_index_cap;        /* power of two */

    struct core_alloc **allocs;
    int n_allocs, cap_allocs;
    int *alloc_index;
    int alloc_index_cap;

    char models[CORE_MAX_MODELS][CORE_MODEL_MAX];
    int n_models;
    int model_gpus[CORE_MAX_MODELS]; /* GPUs of each model over all nodes */
    uint64_t cap_ver;          /* bumped whenever model_gpus changes */
    /* per-workload values a policy derives from M and model_gpus once
     * (pol_cpufrag.c), valid while wstats_wver/_cap_ver match */
    double wstats[CORE_MAX_MODELS + 2];
    uint64_t wstats_wver, wstats_cap_ver;

    uint64_t seed, rng;

    /* target workload M */
    int explicit_workload;
    struct core_class *wsrc;   /* explicit classes as given (model specs re-resolved) */
    int n_wsrc;
    double wcoverage;
    struct core_wclass *wclasses;
    int n_wclasses;
    uint64_t wver;             /* bumped whenever M or the model list changes */
    int wdirty;                /* M must be rebuilt before use */
    struct core_learned *seen;
    int n_seen, cap_seen;
    int64_t seen_total;        /* pods counted in seen */
    int64_t seen_at_prepare;   /* seen_total when M was last rebuilt from it */

    double frag_sum;           /* sum of node frag, valid when frag_sum_wver == wver */
    uint64_t frag_sum_wver;
    int64_t milli_alloc;

    struct core_node_hot *hot; /* parallel to nodes */
    uint64_t *stamps;          /* parallel to nodes: state stamp (see core_score_col) */
    uint64_t stamp_seq;        /* last stamp given */

    /* decision scratch, sized to the node count */
    struct core_node **feasible;
    int *scores;
    uint32_t *ranks;           /* tie-break ranks of the feasible nodes */
    struct core_memo_slot *memo; /* CORE_MEMO_SLOTS, allocated on first use */
    struct core_key_slot *keys;  /* CORE_KEY_SLOTS, allocated on first use */
    uint64_t key_seq;            /* last key serial given */
    struct core_score_col *cols; /* CORE_COLS, allocated on first use */
    uint64_t col_tick;
    struct core_link_memo *link_memo; /* CORE_LINK_MEMO, allocated on first use */
    int link_nodes[CORE_LINK_NVLINK + 1]; /* nodes by link_best */
};

/* core_link_cost's answers by (link matrix, free GPUs, count): nodes of one
 * design share them. Direct-mapped; a slot is overwritten on collision. */
#define CORE_LINK_MEMO 4096
struct core_link_memo {
    uint64_t link_hash;        /* 0: empty */
    uint32_t mask, cost;
    int count;
};

/* cluster.c */
void core_node_refresh(struct core_cluster *c, struct core_node *n);
int core_alloc_tag(const struct core_alloc *a);
int core_model_id(struct core_cluster *c, const char *model, int add);

/* frag.c */
void core_workload_prepare(struct core_cluster *c);
/* F_n(M) after taking take[j] from the share of GPU pos[j] (j < k) and
 * leaving free_cpu; needs core_node_frag(c, n) to be current. */
double core_frag_after(struct core_cluster *c, const struct core_node *n, int64_t free_cpu,
                       const int *pos, const int *take, int k);
void core_workload_seen(struct core_cluster *c, const struct core_alloc *a);
/* Takes back one core_workload_seen(c, a) (a reservation undone). */
void core_workload_unseen(struct core_cluster *c, const struct core_alloc *a);
void core_workload_free(struct core_cluster *c);

/* framework.c */
int core_cycle_init(struct core_cycle *cy, struct core_cluster *c, const struct core_policy *pol,
                    const struct core_pod *pod, struct gs_err *e);
int core_filter_cycle(const struct core_cycle *cy, const struct core_node *n,
                      struct core_status *st);
/* How badly linked the GPUs a pod of 2+ whole or shared GPUs would get on
 * n are (shared: the set best fit picks), lower better, judged as
 * core_topology_pick judges a set (weakest link, then link sum);
 * UINT32_MAX if they do not fit; 0 for every other pod. The first key between nodes the policy scores equal,
 * before the seeded rank. */
uint32_t core_link_cost(const struct core_cycle *cy, const struct core_node *n);
/* A cost no node of the cluster goes below for this pod (from the
 * strongest link any node has): a node that has it needs no rival tried. */
uint32_t core_link_floor(const struct core_cycle *cy);
/* The order between nodes the policy scores equal, lower first: the link
 * cost, then the node's seeded rank. */
uint64_t core_tie_key(const struct core_cycle *cy, const struct core_node *n, uint32_t rank);
/* The pod's soft preferences for each of n candidates (as core_choose
 * takes them), kube-scheduler's NodeAffinity plus TaintToleration scores
 * (0..200, normalised over the candidates that fit): its preferred node
 * affinity terms, and the PreferNoSchedule taints it does not tolerate.
 * 0 when none has any (soft[] then undefined), else 1. */
int core_soft_scores(const struct core_cycle *cy, struct core_node *const *nodes, const int *pos,
                     const unsigned char *fit, int n, int *soft);
/* The node the policy takes of n scored candidates (nodes[j], or the node
 * at position pos[j]; scores[]; ranks[j], or NULL: the rank at pos[j];
 * fit[] as core_score_fit_at leaves it, NULL when all fit): of those the
 * pod's soft preferences rank best (core_soft_scores), the highest score,
 * ties to the lowest core_tie_key (the first of equal keys). -1 when none
 * fits. */
int core_choose(const struct core_cycle *cy, struct core_node *const *nodes, const int *pos,
                const int *scores, const uint32_t *ranks, const unsigned char *fit, int n);
/* Picks the fitting GPUs: whole GPUs (dir 0) as core_topology_pick's
 * best-linked set (index order on a node without links); least free share
 * first (dir 1, best fit) or most free first (dir -1, worst fit). */
int core_pick_order(const struct core_cycle *cy, const struct core_node *n, struct core_alloc *a,
                    int dir);
/* Takes (sign +1) or gives back (-1) an allocation's resources on a node;
 * with check set only verifies that taking fits (see core_reserve), or with
 * CORE_CHECK_SHAPE only that it names what the node has. */
#define CORE_CHECK_SHAPE 2
int core_alloc_apply(struct core_node *n, const struct core_alloc *a, int sign, int check,
                     struct gs_err *e);

/* 64-bit mixing (splitmix64 finaliser), for hashes and the seeded stream. */
static inline uint64_t core_mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

uint64_t core_hash_str(const char *s);

/* core_gpu_fits() for the GPU at position i, from the node's cache. */
static inline int core_fits_pos(const struct core_cycle *cy, const struct core_node *n, int i)
{
    const struct core_node_priv *p = n->priv;
    if (!p->usable[i] || !((cy->model_mask >> p->gmodel[i]) & 1))
        return 0;
    if (cy->req->kind == CORE_REQ_WHOLE)
        return p->gwhole[i];
    if (cy->req->kind != CORE_REQ_SHARED)
        return 0;
    if (cy->req->mem_mib > 0)
        return core_gpu_fits(cy, &n->gpus[i]);
    return p->gfree[i] >= cy->req->milli;
}

/* The fragmentation policies' GPU choice for a non-sharing pod: the
 * num_gpu fitting GPUs with the least free share (lowest position on ties;
 * several shared GPUs: the best-linked of them first, as core_pick_order
 * takes them), written to pos[]; returns how many (fewer when fewer fit). */
static inline int core_least_free_fitting(const struct core_cycle *cy, const struct core_node *n,
                                          int *pos)
{
    const struct core_node_priv *p = n->priv;
    int k = 0;
    for (int i = 0; i < n->n_gpus; i++)
        if (core_fits_pos(cy, n, i))
            pos[k++] = i;
    for (int i = 1; i < k; i++)
        for (int j = i; j > 0 && p->share[pos[j]] < p->share[pos[j - 1]]; j--) {
            int t = pos[j];
            pos[j] = pos[j - 1];
            pos[j - 1] = t;
        }
    if (cy->req->kind == CORE_REQ_SHARED)
        core_topology_pick_ranked(n, pos, k, cy->req->num_gpu);
    return k > cy->req->num_gpu ? cy->req->num_gpu : k;
}

#endif
