/*
 * core/quota.h - GPU quotas per namespace, in total and per GPU model.
 *
 * A GPUQuota object (group gpusched.io, namespaced) caps what the pods of
 * its namespace may hold: whole GPUs, GPU memory and GPU compute, in total
 * and per GPU model ("at most 4 H100 and 64 GiB on T4s"). The extender
 * charges every allocation it places or rebuilds from pod annotations and
 * checks a pod before placing it; the webhook refuses a pod whose request
 * alone exceeds a quota. Both use this module, so the rule is one rule.
 *
 * Pure accounting: no I/O, no locks (callers serialise), no clock. What a
 * pod "holds": whole GPUs count in `gpus`, their full memory in memory and
 * 1000 milli each in compute; a shared GPU counts its memory and compute
 * share only; a MIG instance counts its memory. A model limit applies to
 * every GPU whose model name contains the limit's model string
 * (case-insensitive, as gpusched.io/gpu-type matches).
 *
 * A broken GPUQuota is an error from core_quota_parse(): the caller reports
 * it and keeps it out of the set (an object that breaks on update leaves the
 * last good version in force). It is never read as a zero quota.
 *
 * Ownership: core_quotas_new() returns a set freed by core_quotas_free();
 * quotas passed in are copied. Strings handed to callbacks are borrowed for
 * the call.
 */
#ifndef GPUSCHED_CORE_QUOTA_H
#define GPUSCHED_CORE_QUOTA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "core/request.h"
#include "util/err.h"

#define CORE_QUOTA_MAX_MODELS 16 /* model limits in one GPUQuota */
#define CORE_QUOTA_NONE (-1)     /* no limit on this dimension */

/* One dimension set: whole GPUs, GPU memory (MiB), GPU compute (thousandths
 * of a GPU). As a limit, CORE_QUOTA_NONE means unlimited. */
struct core_quota_limits {
    int64_t gpus, mem_mib, milli;
};

struct core_quota_model {
    char model[CORE_MODEL_MAX];
    struct core_quota_limits lim;
};

struct core_quota {
    char ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
    struct core_quota_limits total;
    int n_models;
    struct core_quota_model models[CORE_QUOTA_MAX_MODELS];
};

/* What a pod holds (or would hold) on GPUs of one model. */
struct core_quota_use {
    char model[CORE_MODEL_MAX];
    int64_t gpus, mem_mib, milli;
};

/* Parses one GPUQuota object (JSON as the API server sends it):
 *   {"apiVersion": "gpusched.io/v1", "kind": "GPUQuota",
 *    "metadata": {"name": "team-a", "namespace": "ml"},
 *    "spec": {"total": {"gpus": 8, "memory": "320Gi", "compute": "6.5"},
 *             "models": [{"model": "H100", "gpus": 4},
 *                        {"model": "T4", "memory": "64Gi"}]}}
 * `gpus` is a whole number, `memory` a byte quantity, `compute` a quantity
 * of GPUs ("250m" = a quarter). Unknown fields are errors (a misspelt limit
 * must not read as "unlimited"); errors name the field. */
int core_quota_parse(const json_t *obj, struct core_quota *q, struct gs_err *e);

/* Called once per broken object of a quota file: `index` is its position. */
typedef void (*core_quota_bad_fn)(void *ud, int index, const struct gs_err *e);

/* Reads a list of GPUQuota objects: a JSON array, a List with `items`
 * (what `kubectl get gpuquotas -A -o json` prints), or one object. A quota
 * file is YAML or JSON: read it with kube_yaml_load() first. Good objects
 * are returned in *out (malloc'd array of *n, caller frees); each broken
 * one is reported to bad() and skipped. Fails only when `doc` is not a
 * list at all. */
int core_quota_parse_doc(const json_t *doc, struct core_quota **out, int *n,
                         core_quota_bad_fn bad, void *ud, struct gs_err *e);

/* What `req` would hold on GPUs of `model` with `gpu_mem_mib` each
 * (0 = unknown: whole GPUs then count no memory). MIG memory is the
 * caller's to fill in (the instance's size). */
void core_quota_use_of(const struct core_request *req, const char *model, int64_t gpu_mem_mib,
                       struct core_quota_use *u);

struct core_cluster;
struct core_alloc;
struct core_node;

/* What an allocation holds, one entry per GPU model it touches (usually
 * one), read from the node it is on: whole GPUs with their full memory,
 * shared and MIG shares as reserved. Returns the number of entries (at
 * most CORE_MAX_GPUS), or -GS_ENOENT if its node is unknown. This is how
 * the extender charges quotas from its rebuilt allocation state. */
int core_quota_use_of_alloc(const struct core_cluster *c, const struct core_alloc *a,
                            struct core_quota_use *out);

/* What `req` would hold on node `n`: on the first GPU model of the node
 * that the request accepts (gpu-type), MIG memory from the node's instances
 * of the profile. */
void core_quota_use_on_node(const struct core_request *req, const struct core_node *n,
                            struct core_quota_use *u);

struct core_quotas;

struct core_quotas *core_quotas_new(void);
void core_quotas_free(struct core_quotas *s);

/* Inserts or replaces (same namespace and name) a quota. */
int core_quotas_put(struct core_quotas *s, const struct core_quota *q, struct gs_err *e);
/* Removes a quota; returns 0, or -GS_ENOENT when absent. */
int core_quotas_remove(struct core_quotas *s, const char *ns, const char *name);
int core_quotas_count(const struct core_quotas *s);

/* Adds (sign > 0) or releases (sign < 0) what a pod holds. Usage is kept
 * for every namespace, with or without a quota, so /metrics can show it. */
int core_quotas_charge(struct core_quotas *s, const char *ns, const struct core_quota_use *u,
                       int n, int sign, struct gs_err *e);
/* Forgets all usage (before rebuilding it from the allocation state). */
void core_quotas_reset_usage(struct core_quotas *s);
/* Usage recounted from the allocations of the cluster (of namespace `only`,
 * or all when NULL): exact whatever happened since (rebuilds, restarts,
 * releases). O(allocations); about 0.1 ms for 8,000 of one namespace. */
int core_quotas_recount(struct core_quotas *s, const struct core_cluster *c, const char *only,
                        struct gs_err *e);
/* Does namespace `ns` have at least one quota? */
int core_quotas_has(const struct core_quotas *s, const char *ns);

/* Would holding `u` on top of current usage exceed a quota of `ns`?
 * Returns 0, or -GS_ENOFIT with e->msg saying which quota, which limit,
 * what is in use and what the pod asks. */
int core_quotas_check(const struct core_quotas *s, const char *ns,
                      const struct core_quota_use *u, int n, struct gs_err *e);

/* Admission: does `req` alone exceed a quota of `ns`, whatever the
 * placement? Checks what does not depend on the node: whole GPUs, compute,
 * shared memory against total limits, and against the model limits when
 * every gpusched.io/gpu-type the pod names falls under an exceeded one.
 * gpu_mem_mib: the least memory of a GPU the pod may get, which whole GPUs
 * count (0: not counted). Returns 0 or -GS_ENOFIT with the reason. */
int core_quotas_admit(const struct core_quotas *s, const char *ns,
                      const struct core_request *req, int64_t gpu_mem_mib, struct gs_err *e);

/* One line per quota limit ("" model = the total): for status and metrics.
 * `used` sums the namespace's usage over the models the limit covers. */
struct core_quota_row {
    const char *ns, *quota, *model;
    struct core_quota_limits limit, used;
};
void core_quotas_foreach(const struct core_quotas *s,
                         void (*fn)(void *ud, const struct core_quota_row *row), void *ud);
/* Raw usage per namespace and exact model name. */
void core_quotas_foreach_usage(const struct core_quotas *s,
                               void (*fn)(void *ud, const char *ns, const char *model,
                                          const struct core_quota_limits *used),
                               void *ud);

/* "64Gi", "1536Mi"; "2.5" GPUs for milli: for reasons and tables. */
void core_quota_fmt_mib(int64_t mib, char *buf, size_t cap);
void core_quota_fmt_milli(int64_t milli, char *buf, size_t cap);

#endif
