/*
 * core/cluster.h - the cluster as the scheduling core sees it: nodes, their
 * GPUs, and the allocations reserved on them.
 *
 * Filter and score run over thousands of nodes per pod, so the model keeps,
 * per node and per GPU, the free capacity already computed: free CPU, host
 * memory and pod slots on the node; free memory (MiB), free compute
 * (thousandths) and free MIG instances on each GPU. Reserve/unreserve keep
 * these exact and refuse anything that would oversubscribe. The extender, the
 * simulator and the device plugin build the same model from their own
 * sources (NodeList JSON, trace CSV, NVML) through struct core_node_spec.
 *
 * Not thread-safe (the extender holds its own lock); no I/O.
 *
 * Ownership: core_cluster_new() returns an object freed by
 * core_cluster_free(). Specs passed in are copied. Node and allocation
 * pointers returned by lookups are borrowed: valid until the next call that
 * changes the cluster (upsert/remove/reserve/unreserve). Node and GPU fields
 * are public for reading; change them only through these functions.
 */
#ifndef GPUSCHED_CORE_CLUSTER_H
#define GPUSCHED_CORE_CLUSTER_H

#include <stdint.h>

#include "core/request.h"
#include "util/err.h"

#define CORE_UUID_MAX 96
#define CORE_MAX_MIG 8       /* MIG instances per GPU (A100/H100: at most 7) */
#define CORE_MAX_MODELS 64   /* distinct GPU models in one cluster */

/* The best path between two GPUs, worst first (nvidia-smi topo -m names).
 * Higher is closer: the topology policy prefers NVLINK, then PIX/PXB (PCIe
 * switches), then PHB/NODE (same NUMA node), then SYS. UNKNOWN is derived
 * from the GPUs' NUMA nodes when the node is added. */
enum core_link {
    CORE_LINK_UNKNOWN = 0,
    CORE_LINK_SYS,    /* across NUMA nodes */
    CORE_LINK_NODE,   /* same NUMA node, across host bridges */
    CORE_LINK_PHB,    /* same host bridge */
    CORE_LINK_PXB,    /* several PCIe switches */
    CORE_LINK_PIX,    /* one PCIe switch */
    CORE_LINK_NVLINK,
};

/* "nvlink", "pix", "pxb", "phb", "node", "sys" -> enum; -1 if unknown. */
int core_link_parse(const char *s);
const char *core_link_name(enum core_link l);

/* ---- input: what a node looks like (built by the caller, copied in) ---- */

struct core_taint {
    const char *key, *value, *effect; /* effect: NoSchedule, PreferNoSchedule, NoExecute */
};

struct core_mig_spec {
    char uuid[CORE_UUID_MAX];
    char profile[CORE_MIG_PROFILE_MAX]; /* "1g.10gb" */
    int64_t mem_mib;
    int unhealthy;             /* the instance faulted (its GPU may be healthy) */
};

struct core_gpu_spec {
    int index;                 /* NVML index, 0..CORE_MAX_GPUS-1, unique on the node */
    char uuid[CORE_UUID_MAX];
    char model[CORE_MODEL_MAX];
    int64_t mem_mib;           /* total memory; 0 = unknown (memory requests never fit) */
    int healthy;               /* 0 = no new pods on it */
    int numa;                  /* NUMA node, -1 unknown */
    /* link[j]: best path to the GPU whose NVML *index* is j (as in the
     * node inventory annotation); entries for absent GPUs are ignored. */
    enum core_link link[CORE_MAX_GPUS];
    int mig_enabled;           /* MIG mode: only MIG requests use this GPU */
    int n_mig;
    struct core_mig_spec mig[CORE_MAX_MIG];
};

struct core_node_spec {
    const char *name;
    int n_labels;
    const char *const *label_keys, *const *label_values;
    int n_taints;
    const struct core_taint *taints;
    int64_t cpu_milli;         /* allocatable CPU, millicores */
    int64_t mem_bytes;         /* allocatable host memory, bytes */
    int max_pods;              /* allocatable pods; 0 = no limit */
    int n_gpus;
    struct core_gpu_spec gpus[CORE_MAX_GPUS];
};

/* ---- the model (public fields are read-only for callers) ---- */

struct core_mig {
    char uuid[CORE_UUID_MAX];
    char profile[CORE_MIG_PROFILE_MAX];
    int64_t mem_mib;
    int used;                  /* reserved by a pod */
    int unhealthy;             /* no new pod; its GPU's health counts too */
};

struct core_gpu {
    int index;                 /* NVML index */
    char uuid[CORE_UUID_MAX];
    char model[CORE_MODEL_MAX];
    int model_id;              /* cluster-wide model number, see core_cluster_model() */
    int64_t mem_mib;
    int healthy;
    int numa;
    uint8_t link[CORE_MAX_GPUS]; /* enum core_link to the GPU at *position* j of node->gpus */
    int mig_enabled, n_mig;
    struct core_mig *mig;      /* n_mig entries, owned by the node */
    /* kept exact by reserve/unreserve */
    int64_t free_mem_mib;
    int free_milli;            /* 0..1000 */
    int n_pods;                /* pods holding a share, a whole GPU or a MIG instance */
};

struct core_node {
    char *name;
    int n_labels;
    char **label_keys, **label_values;
    int n_taints;
    struct core_taint *taints; /* strings owned by the node */
    int64_t cpu_milli, mem_bytes;
    int max_pods;
    int available;             /* 0 after core_cluster_set_available(.., 0) */
    int n_gpus;                /* GPUs in NVML index order */
    struct core_gpu *gpus;     /* n_gpus entries, owned by the node */
    /* what pods holding no allocation here take (core_cluster_set_others) */
    int64_t others_cpu_milli, others_mem_bytes;
    int others_pods;
    /* kept exact by reserve/unreserve and core_cluster_set_others: capacity
     * less every allocation and the others */
    int64_t free_cpu_milli, free_mem_bytes;
    int n_pods;
    uint64_t generation;       /* bumped on every change to this node */
    /* private to the core */
    struct core_node_priv *priv;
};

/* ---- an allocation: what one pod holds on one node ---- */

struct core_alloc {
    char pod_uid[64];
    char pod_name[2 * CORE_NAME_MAX]; /* "namespace/name", for reasons and reports */
    char node[CORE_NAME_MAX];
    enum core_req_kind kind;
    int32_t priority;
    int64_t cpu_milli, mem_bytes;     /* host resources */
    int n;                            /* GPUs (or MIG instances) held */
    int gpu[CORE_MAX_GPUS];           /* positions in node->gpus (ascending for WHOLE) */
    int64_t mem_mib[CORE_MAX_GPUS];   /* GPU memory held per GPU (WHOLE: the GPU's total) */
    int milli[CORE_MAX_GPUS];         /* compute held per GPU, thousandths (WHOLE: 1000) */
    int mig[CORE_MAX_GPUS];           /* MIG instance position on gpu[i], -1 if not MIG */
    uint64_t model_mask;              /* models (cluster ids) the pod was allowed when placed:
                                         the learned M counts it in that class; 0 or
                                         every model = any (core_models_norm) */
};

/* ---- lifecycle and nodes ---- */

struct core_cluster *core_cluster_new(void);
void core_cluster_free(struct core_cluster *c);

/* Seeds the tie-break node order and the random policy's stream. Ties between
 * equally scored nodes go to the node with the smallest seeded rank, a fixed
 * pseudo-random order (the benchmark's "%04d-" name prefix). Default seed 0. */
void core_cluster_set_seed(struct core_cluster *c, uint64_t seed);

/* Adds a node, or replaces the spec of the node with that name (hash lookup)
 * while keeping its allocations on the same GPUs, found by UUID. Validates
 * the spec (field named in *e). An allocation whose GPU or MIG instance is
 * gone is removed (as core_unreserve); the others stay even where the node
 * now has less than they hold: its free amounts go below zero and nothing
 * more fits until they leave. Returns 0 or a negative GS_E* code. */
int core_cluster_upsert_node(struct core_cluster *c, const struct core_node_spec *spec,
                             struct gs_err *e);

/* Removes a node and every allocation on it. -GS_ENOENT if absent. */
int core_cluster_remove_node(struct core_cluster *c, const char *name, struct gs_err *e);

/* Marks a node (un)available: an unavailable node fails every filter (e.g. a
 * stale GPU inventory) but keeps its allocations. -GS_ENOENT if absent. */
int core_cluster_set_available(struct core_cluster *c, const char *name, int available,
                               struct gs_err *e);

/* Sets what the pods that hold no allocation in c take on a node: their
 * CPU, memory and pod slots (kube-scheduler counts every pod on a node;
 * the extender reserves only the GPU pods it placed). The filters and
 * scores see the node's capacity less these and the allocations; a reserve
 * does not: it is checked against the allocations alone, so a placement
 * already made is never refused for pods it does not know about. Kept
 * across core_cluster_upsert_node. -GS_ENOENT if absent, -GS_EINVAL for a
 * negative amount or one above CORE_OTHERS_MAX. */
int core_cluster_set_others(struct core_cluster *c, const char *name, int64_t cpu_milli,
                            int64_t mem_bytes, int pods, struct gs_err *e);
/* The most CPU milli or memory bytes core_cluster_set_others takes: a node's
 * free amount (its capacity less allocations and these) then never
 * overflows. */
#define CORE_OTHERS_MAX (INT64_MAX / 4)

/* Node by name (NULL if absent), and by position 0..count-1 (positions change
 * when nodes are removed). */
struct core_node *core_cluster_find(const struct core_cluster *c, const char *name);
int core_cluster_node_count(const struct core_cluster *c);
struct core_node *core_cluster_node(const struct core_cluster *c, int i);

/* Position in node->gpus of the GPU with this UUID, or of the GPU holding the
 * MIG instance with this UUID (then *mig is its instance position, else -1).
 * Returns -1 if none. */
int core_node_gpu_by_uuid(const struct core_node *n, const char *uuid, int *mig);

/* The value of the node's label key, or NULL. */
const char *core_node_label(const struct core_node *n, const char *key);

/* Name of a cluster-wide GPU model number, and the number of models seen. */
const char *core_cluster_model(const struct core_cluster *c, int model_id);
int core_cluster_model_count(const struct core_cluster *c);
/* GPUs of a model over all nodes (MIG-mode and unhealthy ones included); 0
 * for an unknown model number. */
int core_cluster_model_gpus(const struct core_cluster *c, int model_id);
/* A set of allowed models with "any" spelled one way: ~0 when mask is 0 or
 * holds every model of the cluster, else mask. */
uint64_t core_models_norm(const struct core_cluster *c, uint64_t mask);
/* "A|B|C" -> mask of the cluster's models named exactly so (names it does
 * not know add nothing); "" -> any (~0). */
uint64_t core_spec_mask(const struct core_cluster *c, const char *spec);
/* Its inverse: the names of the models in mask, in name order (the same on
 * every replica, whatever order it met the nodes in), "|"-joined into buf
 * (cap bytes, CORE_MAX_MODELS * CORE_MODEL_MAX holds any); "" for any.
 * Returns buf. */
char *core_models_spec(const struct core_cluster *c, uint64_t mask, char *buf, size_t cap);

/* ---- reserve / unreserve ---- */

/* Records an allocation (keyed by a->pod_uid) and takes its resources from
 * the node and GPUs named in it. Refuses with -GS_ENOFIT and no change if
 * anything would be oversubscribed (CPU, memory, pod count, a GPU's memory or
 * compute, a whole GPU not entirely free, a used MIG instance); -GS_ECONFLICT
 * if the UID already holds an allocation; -GS_ENOENT for an unknown node;
 * -GS_EINVAL for a malformed allocation. Used both for fresh decisions and
 * for rebuilding state from pod annotations. */
int core_reserve(struct core_cluster *c, const struct core_alloc *a, struct gs_err *e);

/* core_reserve for an allocation that was taken off only to try something
 * (a preemption's what-if) and is put back: the learned workload has
 * counted its pod already and does not count it again. */
int core_reserve_back(struct core_cluster *c, const struct core_alloc *a, struct gs_err *e);

/* core_reserve for a pod kubelet already runs there: taken as it is, even
 * where the node or its GPUs then hold more than they have (its allocatable
 * CPU lowered since, a stale assignment of a pod that never ran taken
 * first). Nothing more fits there until enough is given back; refused only
 * for what cannot be recorded (a GPU or MIG instance the node lacks, a used
 * MIG instance, the UID already held). */
int core_reserve_admitted(struct core_cluster *c, const struct core_alloc *a, struct gs_err *e);

/* Gives back everything the pod holds. -GS_ENOENT if it holds nothing. */
int core_unreserve(struct core_cluster *c, const char *pod_uid, struct gs_err *e);
/* core_unreserve for a reservation whose placement did not happen (its
 * bind failed): the learned workload forgets the pod too. */
int core_unreserve_undo(struct core_cluster *c, const char *pod_uid, struct gs_err *e);
/* Takes back the learned workload's count of allocation a (reserved with
 * core_reserve, now or before), leaving any reservation alone: for a pod
 * about to be counted again. */
void core_workload_forget(struct core_cluster *c, const struct core_alloc *a);

/* The allocation held by a pod UID, or NULL. */
const struct core_alloc *core_alloc_find(const struct core_cluster *c, const char *pod_uid);

/* All allocations, positions 0..count-1 (positions change on unreserve). */
int core_cluster_alloc_count(const struct core_cluster *c);
const struct core_alloc *core_cluster_alloc(const struct core_cluster *c, int i);

/* ---- capacity and fragmentation (FGD, Weng et al. ATC'23) ---- */

/* One class of the target workload M: pods asking for cpu_milli CPU and
 * num_gpu GPUs of milli thousandths each (0 GPUs = CPU-only), on any of the
 * models in gpu_spec ("A|B", "" = any). weight is a count or popularity. */
struct core_class {
    int64_t cpu_milli;
    int num_gpu;
    int milli;
    char gpu_spec[256];
    double weight;
};

/* Sets the target workload M used by fragmentation and the fgd policy: the
 * classes sorted by weight (descending), the top ones kept until they cover
 * `coverage` (0..1, the benchmark uses 0.95) of the total weight, then
 * renormalised. Without a workload set, the core learns M from the classes
 * of the pods reserved so far. */
int core_cluster_set_workload(struct core_cluster *c, const struct core_class *classes, int n,
                              double coverage, struct gs_err *e);
/* Classes kept in M (after the cut), for reports. */
int core_cluster_workload_size(const struct core_cluster *c);

/* One class of the learned workload: the pods reserved so far with this
 * CPU, GPU count, per-GPU share (memory share when larger) and allowed
 * models (core_models_norm'd, as the allocation records them). */
struct core_learned {
    int64_t cpu_milli;
    int num_gpu, milli;
    uint64_t model_mask;
    long count;
};
/* The learned classes (none while an explicit workload is set), in the
 * order they first appeared; valid until the next reserve. */
const struct core_learned *core_cluster_learned(const struct core_cluster *c, int *n);
/* The learned classes less the pods that hold an allocation now: what was
 * learned from pods that have ended, which a replica started later cannot
 * learn again from the live pods. Sets *out to a malloc'd array (the
 * caller frees it) and returns its length, or -GS_ENOMEM. */
int core_workload_ended(const struct core_cluster *c, struct core_learned **out);
/* Adds l[0..n) (a core_workload_ended of another replica, models already
 * mapped to this cluster's) to the learned counts. Checks every class
 * first and adds nothing when one is bad; a no-op while an explicit
 * workload is set. */
int core_workload_seed(struct core_cluster *c, const struct core_learned *l, int n,
                       struct gs_err *e);

/* Expected fragmentation F_n(M) of one node, in milli-GPU: the free GPU
 * compute that the typical pod could not use. */
double core_node_frag(struct core_cluster *c, const struct core_node *n);

struct core_stats {
    int nodes, gpus;
    int64_t milli_total;     /* healthy GPUs x 1000 */
    int64_t milli_alloc;     /* compute held by pods (whole GPUs count 1000) */
    double frag_milli;       /* F_cluster = sum of core_node_frag */
    int pods;                /* allocations */
};

/* F_cluster alone, in milli-GPU: O(1) between workload changes. */
double core_cluster_frag(struct core_cluster *c);

/* Cluster totals; fragmentation is cached per node and only recomputed for
 * nodes that changed, so calling this after every pod is cheap. */
void core_cluster_stats(struct core_cluster *c, struct core_stats *st);

#endif
