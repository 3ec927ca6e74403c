/*
 * wh/wh_admit.h - what the admission webhook decides about a pod.
 *
 * Validation refuses assignment annotations written by anyone but the
 * extender, and, with a message naming the container, the resource and
 * the reason: every request core_pod_parse() finds impossible, GPU resources
 * requested without limits, shared memory larger than the largest GPU model
 * of the cluster, more GPUs than the largest node has, a GPU share in an
 * init container while a kubelet that would fail the pod may run it (any
 * before 1.31, or none known), a request that alone exceeds the
 * namespace's GPUQuota (whole GPUs with the memory of the smallest GPU of
 * the models they accept), and a GPU pod that mutation did not patch (a
 * tkestack container left, or with assigners the GPU pod label missing).
 *
 * Mutation returns a JSONPatch: GPU pods get the configured schedulerName
 * unless they chose one, the canonical `gpusched.io/request` annotation
 * (whatever form the pod used, tkestack's included) and the namespace's
 * default policy when they have none, and the `gpusched.io/gpu-pod` label
 * that deploy/'s rule for pod updates selects on; assignment annotations
 * copied onto a pod created without a node are removed (with a warning)
 * where validation would refuse them.
 *
 * No I/O and no locks: the caller passes a config that does not change
 * during the call (the server holds its lock around quota reads).
 */
#ifndef GPUSCHED_WH_ADMIT_H
#define GPUSCHED_WH_ADMIT_H

#include <jansson.h>

#include "core/quota.h"
#include "core/request.h"
#include "util/err.h"

#define WH_MAX_DEFAULTS 64

struct wh_policy_default {
    char ns[CORE_NAME_MAX];
    char policy[32];
};

#define WH_MAX_MODELS 16

/* One GPU model of the cluster and the memory of its smallest GPU. */
struct wh_model {
    char model[CORE_MODEL_MAX];
    int64_t mem_mib;
};

/* What the webhook knows about the cluster's GPUs (0 = unknown: no check). */
struct wh_cluster {
    int64_t max_gpu_mem_mib;         /* memory of the largest GPU model */
    char max_gpu_model[CORE_MODEL_MAX];
    int max_gpus_per_node;
    int kubelet_minor;               /* the oldest GPU node's kubelet 1.x (0: none known) */
    int n_models;                    /* the models seen, for the least memory a whole GPU */
    int models_overflow;             /* more than WH_MAX_MODELS seen: none is used */
    struct wh_model models[WH_MAX_MODELS];
};

/* kubelets before 1.31 fail a pod whose init container asks for a resource
 * no node advertises (kubernetes#124255), such as gpu-memory and gpu-cores */
#define WH_KUBELET_INIT_EXTENDED 31

struct wh_config {
    struct core_names names;
    const char *scheduler_name;      /* "" = leave schedulerName alone */
    struct wh_cluster cluster;
    int n_defaults;
    struct wh_policy_default defaults[WH_MAX_DEFAULTS];
    const char *assigners;           /* users who may write assignment annotations,
                                        comma-separated; NULL or "" = anyone */
};

/* The assignment annotations (ext_annot_is_assignment) are the extender's
 * to write: a pod created with one, or an update that sets, changes or
 * removes one (old: the pod before; NULL on CREATE), by a user not in
 * c->assigners is refused with -GS_EPERM naming the annotation, and so is
 * an update that removes the GPU pod label from a pod asking for a GPU.
 * Without assigners configured, anyone may. */
int wh_check_assignment(const struct wh_config *c, const json_t *old, const json_t *pod,
                        const char *user, struct gs_err *e);

/* Parses "ns=policy,ns2=policy" into c->defaults. */
int wh_parse_defaults(const char *spec, struct wh_config *c, struct gs_err *e);

/* One node's largest GPU model and GPU count, read as the extender reads
 * the node (ext_node_spec), and its kubelet's minor version
 * (status.nodeInfo.kubeletVersion "v1.20.2"; 0 when absent or not 1.x),
 * which is filled in even when the GPUs cannot be read (an error). */
int wh_node_gpus(const json_t *node, const struct core_names *names, struct wh_cluster *out,
                 struct gs_err *e);
/* Folds c into `into`: the larger GPU, the larger count, the older kubelet,
 * every model with the smaller memory. */
void wh_cluster_merge(struct wh_cluster *into, const struct wh_cluster *c);
/* Do a and b say the same? */
int wh_cluster_same(const struct wh_cluster *a, const struct wh_cluster *b);

/* Reads the largest GPU model and GPU count from a NodeList (the
 * gpusched.io/gpu-inventory annotation, or the nvidia.com/gpu.product and
 * nvidia.com/gpu.memory labels with the nvidia.com/gpu capacity). */
int wh_cluster_from_nodes(const json_t *nodelist, const struct core_names *names,
                          struct wh_cluster *out, struct gs_err *e);

/* 0 = allowed; -GS_EINVAL / -GS_ENOFIT with e->msg the reason to show.
 * `ns` is the request's namespace; `quotas` may be NULL. */
int wh_validate_pod(const struct wh_config *c, const struct core_quotas *quotas,
                    const json_t *pod, const char *ns, struct gs_err *e);

/* The JSONPatch (a JSON array, possibly empty) for a pod being created by
 * `user`. warn (warn_cap bytes, may be NULL) gets a warning for the user,
 * "" when none: the assignment annotations of a pod created without
 * spec.nodeName by a user not in c->assigners are removed, since the
 * extender writes them only on an existing pod, just before its Binding
 * (they were copied from another pod: `kubectl get -o yaml` replayed, a
 * backup restored), and wh_check_assignment would refuse the pod. */
int wh_mutate_pod(const struct wh_config *c, const json_t *pod, const char *ns, const char *user,
                  json_t **patch, char *warn, size_t warn_cap, struct gs_err *e);

/* The canonical one-line form of a request: "kind=whole,gpus=2",
 * "kind=shared,gpus=1,memory-mib=2048,milli=500", "kind=mig,profile=1g.10gb,count=2". */
void wh_request_string(const struct core_request *r, char *buf, size_t cap);

#endif
