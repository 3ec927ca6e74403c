/*
 * core/request.h - what a pod asks for, in one canonical form.
 *
 * Kubernetes spells a GPU request five ways (DESIGN.md's resource table:
 * whole GPUs, shared memory + cores, the tkestack vcuda form, MIG profiles)
 * plus CPU and memory, node selectors, required node affinity, tolerations
 * and the gpusched.io/gpu-type annotations. The extender, the webhook, the
 * simulator and the policies must all see the same thing, so every form is
 * parsed here into struct core_request / struct core_pod, and every check
 * that makes a request impossible lives here too, with an error message that
 * names the container and the field:
 *   "containers[0].limits[nvidia.com/gpu-cores]: '150' is out of range 1..100"
 *
 * No I/O: input is a parsed JSON Pod (jansson), output is plain structs.
 *
 * Ownership: core_pod_parse() fills a caller-provided struct core_pod whose
 * dynamic parts (selectors, affinity, tolerations) are released by
 * core_pod_clear(). Quantities are integers in the unit named by the field.
 */
#ifndef GPUSCHED_CORE_REQUEST_H
#define GPUSCHED_CORE_REQUEST_H

#include <jansson.h>
#include <stdint.h>

#include "util/err.h"

#define CORE_MAX_GPUS 16       /* GPUs on one node, and per request */
#define CORE_MILLI 1000        /* one whole GPU's compute, in thousandths */
#define CORE_NAME_MAX 254      /* Kubernetes object names are <= 253 */
#define CORE_MODEL_MAX 64
#define CORE_MIG_PROFILE_MAX 32
#define CORE_MAX_TYPES 8       /* gpu-type include / exclude substrings */

enum core_req_kind {
    CORE_REQ_NONE = 0, /* no GPU: CPU/memory only */
    CORE_REQ_WHOLE,    /* num_gpu whole, exclusive GPUs */
    CORE_REQ_SHARED,   /* num_gpu GPUs, each shared: mem_mib + milli per GPU */
    CORE_REQ_MIG,      /* mig_count instances of mig_profile */
};

/* Resource and annotation names; defaults from core_names_default(),
 * each configurable in the extender's config; the device plugin, the
 * webhook and status take them as two prefixes (core_names_prefixed). */
struct core_names {
    const char *gpu;          /* "nvidia.com/gpu" */
    const char *gpu_memory;   /* "nvidia.com/gpu-memory" */
    const char *gpu_cores;    /* "nvidia.com/gpu-cores" */
    const char *vcuda_core;   /* "nvidia.com/vcuda-core" */
    const char *vcuda_memory; /* "nvidia.com/vcuda-memory" */
    const char *mig_prefix;   /* "nvidia.com/mig-" */
    const char *annot_prefix; /* "gpusched.io/" */
};
const struct core_names *core_names_default(void);

#define CORE_RES_PREFIX_DEFAULT "nvidia.com/"
#define CORE_ANNOT_PREFIX_DEFAULT "gpusched.io/"
#define CORE_RES_PREFIX_MAX 24    /* "nvidia.com/": the device plugin's names */
#define CORE_ANNOT_PREFIX_MAX 63

/* Checks a name prefix ("nvidia.com/", "gpusched.io/"): a DNS subdomain
 * (lower-case letters, digits, '-' and '.') then '/', at most max bytes.
 * `what` names it in the error. */
int core_prefix_check(const char *what, const char *prefix, size_t max, struct gs_err *e);

/* Names with every resource under one prefix, the defaults' names after it
 * (gpu, gpu-memory, gpu-cores, vcuda-core, vcuda-memory, mig-), and the
 * annotations under another: --resource-prefix and --annotation-prefix of
 * the device plugin, the webhook and status. st->names points into st. */
struct core_names_store {
    char res[6][CORE_RES_PREFIX_MAX + 16];
    char annot[CORE_ANNOT_PREFIX_MAX + 1];
    struct core_names names;
};
int core_names_prefixed(struct core_names_store *st, const char *res_prefix,
                        const char *annot_prefix, struct gs_err *e);

/* One GPU request, summed over the pod's containers as Kubernetes sums them
 * (max of the init containers' and the sum of the app containers'). */
struct core_request {
    enum core_req_kind kind;
    int num_gpu;              /* GPUs (WHOLE, SHARED); 0 for NONE and MIG */
    int64_t mem_mib;          /* per GPU, SHARED only (0 = no memory limit) */
    int milli;                /* per GPU compute in thousandths: 1000 for WHOLE;
                                 SHARED: gpu-cores*10, or 0 when not given */
    char mig_profile[CORE_MIG_PROFILE_MAX]; /* "1g.10gb", MIG only */
    int mig_count;
    int64_t cpu_milli;        /* host CPU request, millicores */
    int64_t mem_bytes;        /* host memory request, bytes */
    /* gpusched.io/gpu-type and gpu-type-exclude: model substrings */
    int n_types, n_types_exclude;
    char types[CORE_MAX_TYPES][CORE_MODEL_MAX];
    char types_exclude[CORE_MAX_TYPES][CORE_MODEL_MAX];
};

enum core_sel_op { CORE_OP_IN, CORE_OP_NOT_IN, CORE_OP_EXISTS, CORE_OP_DOES_NOT_EXIST,
                   CORE_OP_GT, CORE_OP_LT };

struct core_requirement {      /* one matchExpression (or matchFields entry) */
    char *key;
    int field;                 /* 1: matchFields, key is the node field metadata.name */
    enum core_sel_op op;
    int n_values;
    char **values;
};

struct core_term {             /* one nodeSelectorTerm: all requirements (AND) */
    int n_reqs;
    struct core_requirement *reqs;
};

/* One preferred podAffinity (weight > 0) or podAntiAffinity (weight < 0)
 * term: the pod prefers nodes whose topology domain (the nodes sharing the
 * node's topology_key label value) holds pods the selector picks. Or a
 * topologySpreadConstraint with whenUnsatisfiable ScheduleAnyway (max_skew
 * > 0, weight 0): it prefers domains holding fewer of them. */
struct core_pod_term {
    int weight;                /* -100..-1 or 1..100; 0 for a spread constraint */
    int max_skew;              /* a spread constraint's maxSkew, else 0 */
    char *topology_key;
    int n_namespaces;          /* the namespaces of the pods it picks; */
    char **namespaces;         /* none: the pod's own */
    int all_namespaces;        /* namespaceSelector: {} */
    int selects;               /* a labelSelector was given (none picks no pod), and
                                  no namespaceSelector with labels (unknown here) */
    struct core_term selector; /* matchLabels (as In) and matchExpressions: all hold */
};

struct core_node;

struct core_toleration {
    char *key;                 /* NULL/"" with Exists = tolerate everything */
    char *value;
    int op_exists;             /* operator Exists (else Equal) */
    char *effect;              /* NULL/"" = all effects */
};

struct core_pod {
    char ns[CORE_NAME_MAX], name[CORE_NAME_MAX], uid[64];
    int32_t priority;
    struct core_request req;
    int n_selector;            /* spec.nodeSelector: key=value, all must match */
    char **selector_keys, **selector_values;
    int n_terms;               /* required node affinity: any term (OR) */
    struct core_term *terms;
    int n_prefs;               /* preferred node affinity: each term that matches */
    struct core_term *prefs;   /* adds its weight (1..100) to the node */
    int *pref_weights;
    int n_tolerations;
    struct core_toleration *tolerations;
    char policy[32];           /* gpusched.io/policy annotation, "" = default */
    int n_pod_terms;           /* preferred pod (anti-)affinity, soft spread */
    struct core_pod_term *pod_terms;
    /* Set by a caller that knows the placed pods (the extender); NULL: no
     * pod terms apply (the simulator's pods have none).
     * pod_terms_count: for each of the pod's terms, how many pods in the
     * node's domain it picks (core_pod_term_picks) into
     * counts[n_pod_terms]; returns what the terms of placed pods that pick
     * this pod add to the node (kube-scheduler's symmetric half of
     * InterPodAffinity: each such term's weight when the node shares the
     * placed pod's domain). pod_terms_picked: whether any such term
     * exists, so that a pod without terms of its own is ranked by them. */
    long long (*pod_terms_count)(void *ud, const struct core_pod *pod,
                                 const struct core_node *node, long long *counts);
    int (*pod_terms_picked)(void *ud, const struct core_pod *pod);
    void *pod_terms_ud;
    const json_t *pod_terms_obj; /* the Pod object (borrowed): the labels they pick */
};

/* kube-scheduler's hardPodAffinityWeight (InterPodAffinityArgs, 0..100,
 * default 1): what a placed pod's required pod affinity term that picks a
 * pod adds to the nodes of its domain in that pod's score. */
#define CORE_HARD_POD_AFFINITY_WEIGHT 1
#define CORE_HARD_POD_AFFINITY_WEIGHT_MAX 100

/* Parses a Kubernetes quantity ("16Gi", "500m", "1.5", "2e3") and returns it
 * multiplied by `scale` (1 for bytes/counts, 1000 for milli-units), rounded
 * up as Kubernetes does. Errors name `field`. Rejects negatives, junk,
 * overflow and strings over 64 bytes. */
int core_quantity_parse(const char *s, int64_t scale, int64_t *out, const char *field,
                        struct gs_err *e);

/* Parses a Pod object (the JSON of `kubectl get pod -o json`). Fills *pod;
 * a missing namespace reads as "default". For GPU resources limits win;
 * requests alone are accepted, and when both are given they must be equal.
 * on error returns -GS_EINVAL with e->msg naming the container and field,
 * and leaves *pod cleared. Impossible requests (cores > 100, vcuda-core 150,
 * MIG mixed with whole GPUs in one container, memory without gpu, ...) are
 * errors here. */
int core_pod_parse(const json_t *pod, const struct core_names *names, struct core_pod *pod_out,
                   struct gs_err *e);
void core_pod_clear(struct core_pod *pod);

/* Parses only what the pod's pod (anti-)affinity terms pick other pods
 * with, for a pod already placed whose terms may pick a pod to come
 * (kube-scheduler's symmetric half of InterPodAffinity): its namespace,
 * name and UID, and as pod_terms its preferred podAffinity (weight > 0),
 * preferred podAntiAffinity (weight < 0) and required podAffinity terms
 * (weight hard_weight, 0..CORE_HARD_POD_AFFINITY_WEIGHT_MAX; 0 leaves them
 * out, as kube-scheduler does); not its spread constraints. Returns the
 * number of terms, or -GS_EINVAL naming the field (*pod cleared). */
int core_pod_affinity_parse(const json_t *pod, int hard_weight, struct core_pod *out,
                            struct gs_err *e);

/* One container's own request, checked as core_pod_parse() checks it; `list`
 * ("containers" / "initContainers") and `idx` only name it in messages. For
 * callers that must say which container breaks a cluster-wide limit. */
int core_container_parse(const json_t *ctr, const struct core_names *names, const char *list,
                         size_t idx, struct core_request *out, struct gs_err *e);

struct core_taint;

/* The pod's soft preferences for a node, as kube-scheduler's NodeAffinity
 * and TaintToleration scores count them before they normalise: the summed
 * weights of its preferred node affinity terms that the node matches, and
 * the node's PreferNoSchedule taints the pod does not tolerate. */
void core_pod_soft_counts(const struct core_pod *pod, const char *node_name, int n_labels,
                          char *const *keys, char *const *values, int n_taints,
                          const struct core_taint *taints, int *affinity, int *intolerable);

/* Does the pod's term t pick the pod other (a Pod object: its namespace and
 * metadata.labels), as kube-scheduler's InterPodAffinity (PodTopologySpread
 * for a spread constraint: the pod's own namespace) matches it? */
int core_pod_term_picks(const struct core_pod *pod, const struct core_pod_term *t,
                        const json_t *other);

/* A metav1.LabelSelector (matchLabels, matchExpressions with In, NotIn,
 * Exists, DoesNotExist) into *out, errors naming `field`; *out is empty
 * after an error. Free with core_term_clear(). */
int core_label_selector_parse(const json_t *ls, const char *field, struct core_term *out,
                              struct gs_err *e);

/* Do these labels (an object, or NULL: none) pass every requirement of the
 * selector? An empty selector passes every set of labels. */
int core_label_selector_matches(const struct core_term *sel, const json_t *labels);

void core_term_clear(struct core_term *term);

/* Does a node with these labels pass the pod's nodeSelector and required
 * affinity? Labels are parallel arrays. */
int core_pod_matches_labels(const struct core_pod *pod, int n, char *const *keys,
                            char *const *values);

/* The same, knowing the node's name too: matchFields on metadata.name (how
 * DaemonSet pods pin a node) are evaluated; core_pod_matches_labels() lets
 * them pass. */
int core_pod_matches_node(const struct core_pod *pod, const char *node_name, int n,
                          char *const *keys, char *const *values);

/* Does the pod tolerate a taint (effect NoSchedule / NoExecute matter)? */
int core_pod_tolerates(const struct core_pod *pod, const char *key, const char *value,
                       const char *effect);

/* Does a GPU model pass the request's gpu-type include/exclude lists?
 * Substrings match case-insensitively ("h100" matches "NVIDIA-H100-80GB"). */
int core_request_model_ok(const struct core_request *req, const char *model);

#endif
