/*
 * tests/unit/test_core_helpers.h - builders for hand-made nodes and pods,
 * shared by the core's unit tests (k8s' st.MakePod() in a few lines of C).
 */
#ifndef GPUSCHED_TEST_CORE_HELPERS_H
#define GPUSCHED_TEST_CORE_HELPERS_H

#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"

/* A seeded generator for randomised tests: a number in [0, n). */
static inline int tc_rnd(uint64_t *state, int n)
{
    *state = *state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((*state >> 33) % (uint64_t)n);
}

/* The spec of a node with n GPUs of one model, each gpu_mem MiB, all
 * healthy (a static copy: change it, then upsert it). */
static inline struct core_node_spec *tc_spec(const char *name, int64_t cpu_milli,
                                             int64_t mem_gib, int n, const char *model,
                                             int64_t gpu_mem)
{
    static struct core_node_spec s;
    memset(&s, 0, sizeof s);
    s.name = name;
    s.cpu_milli = cpu_milli;
    s.mem_bytes = mem_gib << 30;
    s.n_gpus = n;
    for (int i = 0; i < n; i++) {
        s.gpus[i].index = i;
        snprintf(s.gpus[i].uuid, sizeof s.gpus[i].uuid, "GPU-%s-%d", name, i);
        snprintf(s.gpus[i].model, sizeof s.gpus[i].model, "%s", model);
        s.gpus[i].mem_mib = gpu_mem;
        s.gpus[i].healthy = 1;
        s.gpus[i].numa = i < n / 2 ? 0 : 1;
    }
    return &s;
}

/* A node with n GPUs of one model, each gpu_mem MiB, all healthy. */
static inline int tc_node(struct core_cluster *c, const char *name, int64_t cpu_milli,
                          int64_t mem_gib, int n, const char *model, int64_t gpu_mem)
{
    return core_cluster_upsert_node(c, tc_spec(name, cpu_milli, mem_gib, n, model, gpu_mem),
                                    NULL);
}

static inline struct core_pod tc_pod(const char *uid, enum core_req_kind kind, int num_gpu,
                                     int milli, int64_t mem_mib, int64_t cpu_milli)
{
    struct core_pod p;
    memset(&p, 0, sizeof p);
    snprintf(p.uid, sizeof p.uid, "%s", uid);
    snprintf(p.name, sizeof p.name, "%s", uid);
    snprintf(p.ns, sizeof p.ns, "default");
    p.req.kind = kind;
    p.req.num_gpu = num_gpu;
    p.req.milli = kind == CORE_REQ_WHOLE ? 1000 : milli;
    p.req.mem_mib = mem_mib;
    p.req.cpu_milli = cpu_milli;
    return p;
}

/* Schedules the pod on exactly this node with the policy and reserves it. */
static inline int tc_place(struct core_cluster *c, const char *node, const struct core_pod *p,
                           const char *policy)
{
    struct core_alloc a;
    struct gs_err e = GS_ERR_INIT;
    int rc = core_pick_gpus(c, core_policy_find(policy), core_cluster_find(c, node), p, &a, &e);
    if (rc < 0)
        return rc;
    return core_reserve(c, &a, &e);
}

#endif
