/*
 * core/filter.c - the filter plugins: can this pod run on this node now?
 *
 * One table, run in order; the first rejection decides. Each plugin returns
 * a core_code and, only when the caller wants one (st != NULL), writes a
 * reason a person can act on. The hot paths (simulator, schedule-one) pass
 * NULL and format nothing. UNRESOLVABLE means no amount of waiting helps:
 * the pod would not fit even if everything on the node left.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/internal.h"

struct filter_plugin {
    const char *name;
    enum core_code (*fn)(const struct core_cycle *cy, const struct core_node *n,
                         struct core_status *st);
};

__attribute__((format(printf, 3, 4)))
static enum core_code reject(struct core_status *st, enum core_code code, const char *fmt, ...)
{
    if (st) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(st->reason, sizeof st->reason, fmt, ap);
        va_end(ap);
    }
    return code;
}

static enum core_code f_available(const struct core_cycle *cy, const struct core_node *n,
                                  struct core_status *st)
{
    (void)cy;
    if (!n->available)
        return reject(st, CORE_UNSCHEDULABLE, "node is marked unavailable (GPU inventory stale "
                      "or node not ready)");
    return CORE_FIT;
}

static enum core_code f_pods(const struct core_cycle *cy, const struct core_node *n,
                             struct core_status *st)
{
    (void)cy;
    if (n->max_pods && n->n_pods >= n->max_pods)
        return reject(st, CORE_UNSCHEDULABLE, "node already runs %d of %d pods", n->n_pods,
                      n->max_pods);
    return CORE_FIT;
}

static enum core_code f_cpu(const struct core_cycle *cy, const struct core_node *n,
                            struct core_status *st)
{
    int64_t want = cy->req->cpu_milli;
    if (want <= n->free_cpu_milli)
        return CORE_FIT;
    return reject(st, want > n->cpu_milli ? CORE_UNRESOLVABLE : CORE_UNSCHEDULABLE,
                  "node has %lldm CPU free of %lldm, pod needs %lldm",
                  (long long)n->free_cpu_milli, (long long)n->cpu_milli, (long long)want);
}

static enum core_code f_memory(const struct core_cycle *cy, const struct core_node *n,
                               struct core_status *st)
{
    int64_t want = cy->req->mem_bytes;
    if (want <= n->free_mem_bytes)
        return CORE_FIT;
    return reject(st, want > n->mem_bytes ? CORE_UNRESOLVABLE : CORE_UNSCHEDULABLE,
                  "node has %lld MiB memory free of %lld MiB, pod needs %lld MiB",
                  (long long)(n->free_mem_bytes >> 20), (long long)(n->mem_bytes >> 20),
                  (long long)((want + (1 << 20) - 1) >> 20));
}

static enum core_code f_taints(const struct core_cycle *cy, const struct core_node *n,
                               struct core_status *st)
{
    for (int i = 0; i < n->n_taints; i++) {
        const struct core_taint *t = &n->taints[i];
        if (strcmp(t->effect, "NoSchedule") != 0 && strcmp(t->effect, "NoExecute") != 0)
            continue;
        if (!core_pod_tolerates(cy->pod, t->key, t->value, t->effect))
            return reject(st, CORE_UNRESOLVABLE, "node has taint %s=%s:%s that the pod does "
                          "not tolerate", t->key, t->value, t->effect);
    }
    return CORE_FIT;
}

static enum core_code f_labels(const struct core_cycle *cy, const struct core_node *n,
                               struct core_status *st)
{
    if (cy->pod->n_selector == 0 && cy->pod->n_terms == 0)
        return CORE_FIT;
    /* with the node's name: matchFields on metadata.name pin a node (the
     * simulator and standalone mode have no kube-scheduler to do it) */
    if (core_pod_matches_node(cy->pod, n->name, n->n_labels, n->label_keys, n->label_values))
        return CORE_FIT;
    return reject(st, CORE_UNRESOLVABLE, "node labels do not match the pod's %s",
                  cy->pod->n_selector ? "nodeSelector" : "required node affinity");
}

/* Comma-separated list of the node's usable GPU models, for reasons. */
static void node_models(const struct core_node *n, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n->n_gpus && used + 1 < size; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= strcmp(n->gpus[j].model, n->gpus[i].model) == 0;
        if (!dup)
            used += (size_t)snprintf(buf + used, size - used, "%s%s", used ? "," : "",
                                     n->gpus[i].model);
    }
}

static void req_types(const struct core_request *r, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < r->n_types && used + 1 < size; i++)
        used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? " or " : "", r->types[i]);
}

static enum core_code f_mig(const struct core_cycle *cy, const struct core_node *n,
                            struct core_status *st)
{
    const struct core_request *r = cy->req;
    int present = 0, total = 0, free_ = 0;
    for (int i = 0; i < n->n_gpus; i++) {
        const struct core_gpu *g = &n->gpus[i];
        if (!g->mig_enabled || !((cy->model_mask >> g->model_id) & 1))
            continue;
        int held = core_gpu_held_whole(g);
        for (int m = 0; m < g->n_mig; m++)
            if (strcmp(g->mig[m].profile, r->mig_profile) == 0) {
                present++;
                total += g->healthy && !g->mig[m].unhealthy;
                free_ += g->healthy && !g->mig[m].unhealthy && !g->mig[m].used && !held;
            }
    }
    if (free_ >= r->mig_count)
        return CORE_FIT;
    if (!present)
        return reject(st, CORE_UNRESOLVABLE, "node has no MIG instance of %s", r->mig_profile);
    if (total < r->mig_count)
        return reject(st, CORE_UNRESOLVABLE, "node has %d healthy MIG instances of %s (of %d), "
                      "pod needs %d", total, r->mig_profile, present, r->mig_count);
    return reject(st, CORE_UNSCHEDULABLE, "node has %d free MIG instances of %s, pod needs %d",
                  free_, r->mig_profile, r->mig_count);
}

static enum core_code f_gpu(const struct core_cycle *cy, const struct core_node *n,
                            struct core_status *st)
{
    const struct core_request *r = cy->req;
    char models[128], types[128];

    if (r->kind == CORE_REQ_NONE)
        return CORE_FIT;
    if (n->n_gpus == 0)
        return reject(st, CORE_UNRESOLVABLE, "node has no GPUs");
    if (!(n->priv->model_mask & cy->model_mask) && r->kind != CORE_REQ_MIG) {
        if (!st)
            return CORE_UNRESOLVABLE;
        node_models(n, models, sizeof models);
        req_types(r, types, sizeof types);
        if (r->n_types)
            return reject(st, CORE_UNRESOLVABLE, "no GPU of model %s (node has %s)", types, models);
        return reject(st, CORE_UNRESOLVABLE, "node's GPUs (%s) are all of excluded models",
                      models);
    }
    if (r->kind == CORE_REQ_MIG)
        return f_mig(cy, n, st);

    int fit = 0, allowed = 0;
    for (int i = 0; i < n->n_gpus; i++) {
        const struct core_gpu *g = &n->gpus[i];
        if (!n->priv->usable[i] || !((cy->model_mask >> g->model_id) & 1))
            continue;
        allowed++;
        fit += core_gpu_fits(cy, g);
    }
    if (fit >= r->num_gpu)
        return CORE_FIT;
    if (!st)
        return allowed < r->num_gpu ? CORE_UNRESOLVABLE : CORE_UNSCHEDULABLE;
    if (allowed < r->num_gpu)
        return reject(st, CORE_UNRESOLVABLE, "node has %d healthy GPUs%s, pod needs %d", allowed,
                      r->n_types || r->n_types_exclude ? " of an allowed model" : "",
                      r->num_gpu);
    if (r->kind == CORE_REQ_WHOLE)
        return reject(st, CORE_UNSCHEDULABLE, "node has %d free GPUs, pod needs %d", fit,
                      r->num_gpu);
    /* SHARED: say which resource is short, on the GPU closest to fitting */
    int64_t max_total = 0;
    int best_mem = -1, best_milli = -1;
    for (int i = 0; i < n->n_gpus; i++) {
        const struct core_gpu *g = &n->gpus[i];
        if (!n->priv->usable[i] || !((cy->model_mask >> g->model_id) & 1))
            continue;
        if (g->mem_mib > max_total)
            max_total = g->mem_mib;
        if (best_mem < 0 || g->free_mem_mib > n->gpus[best_mem].free_mem_mib)
            best_mem = i;
        if (g->free_mem_mib >= r->mem_mib &&
            (best_milli < 0 || g->free_milli > n->gpus[best_milli].free_milli))
            best_milli = i;
    }
    if (r->mem_mib > max_total)
        return reject(st, CORE_UNRESOLVABLE, "GPUs here have at most %lld MiB, pod needs %lld "
                      "MiB per GPU", (long long)max_total, (long long)r->mem_mib);
    if (r->num_gpu > 1)
        return reject(st, CORE_UNSCHEDULABLE, "node has %d GPUs with %lld MiB and %d thousandths "
                      "free, pod needs %d", fit, (long long)r->mem_mib, r->milli, r->num_gpu);
    if (best_milli < 0) {
        const struct core_gpu *g = &n->gpus[best_mem];
        return reject(st, CORE_UNSCHEDULABLE, "GPU %d has %lld MiB free, pod needs %lld MiB",
                      g->index, (long long)g->free_mem_mib, (long long)r->mem_mib);
    }
    const struct core_gpu *g = &n->gpus[best_milli];
    return reject(st, CORE_UNSCHEDULABLE, "GPU %d has %d thousandths of compute free, pod needs "
                  "%d", g->index, g->free_milli, r->milli);
}

static const struct filter_plugin filters[] = {
    {"NodeAvailable", f_available},
    {"NodePods", f_pods},
    {"NodeResourcesFit/cpu", f_cpu},
    {"NodeResourcesFit/memory", f_memory},
    {"TaintToleration", f_taints},
    {"NodeAffinity", f_labels},
    {"GPUFit", f_gpu},
};

int core_filter_cycle(const struct core_cycle *cy, const struct core_node *n,
                      struct core_status *st)
{
    for (size_t i = 0; i < sizeof filters / sizeof filters[0]; i++) {
        enum core_code code = filters[i].fn(cy, n, st);
        if (code != CORE_FIT) {
            if (st) {
                st->code = code;
                st->plugin = filters[i].name;
            }
            return 0;
        }
    }
    if (st) {
        st->code = CORE_FIT;
        st->plugin = NULL;
        st->reason[0] = '\0';
    }
    return 1;
}

const char *core_code_name(enum core_code c)
{
    switch (c) {
#define XX(name, desc) case CORE_##name: return #name;
        CORE_CODE_MAP(XX)
#undef XX
    }
    return "UNKNOWN";
}

int core_filter(struct core_cluster *c, const struct core_node *n, const struct core_pod *pod,
                struct core_status *st)
{
    struct core_cycle cy;
    struct gs_err e = GS_ERR_INIT;
    if (core_cycle_init(&cy, c, NULL, pod, &e) < 0) {
        if (st) {
            st->code = CORE_UNRESOLVABLE;
            st->plugin = "Request";
            snprintf(st->reason, sizeof st->reason, "%.*s", (int)sizeof st->reason - 1, e.msg);
        }
        return 0;
    }
    return core_filter_cycle(&cy, n, st);
}
