/* ext/annot.c - see annot.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/annot.h"
#include "kube/client.h"

static const char *const kinds[] = {"none", "whole", "shared", "mig"};

static void set(json_t *o, const char *prefix, const char *key, const char *val)
{
    char k[128];
    snprintf(k, sizeof k, "%s%s", prefix, key);
    json_object_set_new(o, k, json_string(val));
}

static const char *get(const json_t *o, const char *prefix, const char *key)
{
    char k[128];
    const json_t *v;
    snprintf(k, sizeof k, "%s%s", prefix, key);
    v = json_object_get(o, k);
    return json_is_string(v) ? json_string_value(v) : NULL;
}

json_t *ext_annot_build(const struct core_cluster *c, const struct core_node *n,
                        const struct core_alloc *a, const char *prefix, const char *assigned_at)
{
    json_t *o = json_object();
    char uuids[CORE_MAX_GPUS * (CORE_UUID_MAX + 1)] = "", idx[CORE_MAX_GPUS * 4] = "", num[32];
    char now[40];
    size_t ul = 0, il = 0;

    for (int i = 0; i < a->n; i++) {
        const struct core_gpu *g = &n->gpus[a->gpu[i]];
        const char *u = a->mig[i] >= 0 ? g->mig[a->mig[i]].uuid : g->uuid;
        ul += (size_t)snprintf(uuids + ul, sizeof uuids - ul, "%s%s", i ? "," : "", u);
        il += (size_t)snprintf(idx + il, sizeof idx - il, "%s%d", i ? "," : "", g->index);
    }
    set(o, prefix, "node", a->node);
    set(o, prefix, "request-kind", kinds[a->kind]);
    set(o, prefix, "gpu-uuids", uuids);
    set(o, prefix, "gpu-indices", idx);
    snprintf(num, sizeof num, "%lld", (long long)(a->n ? a->mem_mib[0] : 0));
    set(o, prefix, "gpu-memory", num);
    snprintf(num, sizeof num, "%d", a->n ? a->milli[0] : 0);
    set(o, prefix, "gpu-milli", num);
    if (a->kind == CORE_REQ_MIG && a->n)
        set(o, prefix, "mig-profile", n->gpus[a->gpu[0]].mig[a->mig[0]].profile);
    uint64_t models = core_models_norm(c, a->model_mask);
    if (models != ~0ULL) { /* the pod was held to some models: the learned M's class */
        char list[CORE_MAX_MODELS * CORE_MODEL_MAX];
        set(o, prefix, "gpu-models", core_models_spec(c, models, list, sizeof list));
    }
    if (!assigned_at) {
        kube_now_micro(now, sizeof now);
        assigned_at = now;
    }
    set(o, prefix, "assigned-at", assigned_at);
    return o;
}

int ext_annot_is_assignment(const char *key, const char *prefix)
{
    static const char *const keys[] = {"node",       "request-kind", "gpu-uuids",
                                       "gpu-indices", "gpu-memory",   "gpu-milli",
                                       "mig-profile", "gpu-models",   "assigned-at"};
    size_t pl = strlen(prefix);
    if (strncmp(key, prefix, pl) != 0)
        return 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key + pl, keys[i]) == 0)
            return 1;
    return 0;
}

const char *ext_annot_node(const json_t *annotations, const char *prefix)
{
    const char *node = get(annotations, prefix, "node");
    return node && *node && get(annotations, prefix, "gpu-uuids") ? node : NULL;
}

static int parse_num(const char *s, long long lo, long long hi, long long *out)
{
    char *end;
    if (!s || !*s)
        return -1;
    *out = strtoll(s, &end, 10);
    return *end || *out < lo || *out > hi ? -1 : 0;
}

int ext_annot_parse(const struct core_cluster *c, const json_t *annotations, const char *prefix,
                    struct core_alloc *a, struct gs_err *e)
{
    const char *node = ext_annot_node(annotations, prefix);
    const char *kind = get(annotations, prefix, "request-kind");
    const char *uuids = get(annotations, prefix, "gpu-uuids");
    const char *mem = get(annotations, prefix, "gpu-memory");
    const char *milli = get(annotations, prefix, "gpu-milli");
    const char *models = get(annotations, prefix, "gpu-models");
    const struct core_node *n;
    long long memv = 0, milliv = 0;
    int k;

    if (!node)
        return gs_errf(e, GS_EINVAL, "%snode: missing", prefix);
    if (strlen(node) >= sizeof a->node)
        return gs_errf(e, GS_EINVAL, "%snode: too long", prefix);
    if (!(n = core_cluster_find(c, node)))
        return gs_errf(e, GS_ENOENT, "%snode: node '%s' is unknown", prefix, node);
    for (k = 1; k < 4 && (!kind || strcmp(kind, kinds[k]) != 0); k++)
        ;
    if (k == 4)
        return gs_errf(e, GS_EINVAL, "%srequest-kind: '%s' is not whole, shared or mig", prefix,
                       kind ? kind : "");
    if (k != CORE_REQ_WHOLE && parse_num(mem, 0, 1LL << 40, &memv) < 0)
        return gs_errf(e, GS_EINVAL, "%sgpu-memory: not a MiB count", prefix);
    if (k != CORE_REQ_WHOLE && parse_num(milli, 0, CORE_MILLI, &milliv) < 0)
        return gs_errf(e, GS_EINVAL, "%sgpu-milli: not in 0..%d", prefix, CORE_MILLI);
    snprintf(a->node, sizeof a->node, "%s", node);
    a->kind = (enum core_req_kind)k;
    a->model_mask = core_models_norm(c, core_spec_mask(c, models ? models : ""));
    a->n = 0;
    const char *p = uuids;
    while (*p) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char u[CORE_UUID_MAX];
        int mig = -1, pos;
        if (a->n == CORE_MAX_GPUS || len == 0 || len >= sizeof u)
            return gs_errf(e, GS_EINVAL, "%sgpu-uuids: malformed list", prefix);
        memcpy(u, p, len);
        u[len] = '\0';
        if ((pos = core_node_gpu_by_uuid(n, u, &mig)) < 0)
            return gs_errf(e, GS_ENOENT, "%sgpu-uuids: %s is not a GPU of node %s (gone, or "
                           "not reported yet)", prefix, u, node);
        if ((k == CORE_REQ_MIG) != (mig >= 0))
            return gs_errf(e, GS_EINVAL, "%sgpu-uuids: %s is %sa MIG instance", prefix, u,
                           mig >= 0 ? "" : "not ");
        a->gpu[a->n] = pos;
        a->mig[a->n] = mig;
        a->mem_mib[a->n] = k == CORE_REQ_WHOLE ? n->gpus[pos].mem_mib
                           : k == CORE_REQ_MIG ? n->gpus[pos].mig[mig].mem_mib
                                               : memv;
        a->milli[a->n] = k == CORE_REQ_SHARED ? (int)milliv : k == CORE_REQ_WHOLE ? CORE_MILLI : 0;
        a->n++;
        p += len;
        if (*p == ',')
            p++;
    }
    if (a->n == 0)
        return gs_errf(e, GS_EINVAL, "%sgpu-uuids: empty", prefix);
    if (k == CORE_REQ_WHOLE) /* the core keeps whole GPUs in ascending positions */
        for (int i = 1; i < a->n; i++)
            for (int j = i; j > 0 && a->gpu[j - 1] > a->gpu[j]; j--) {
                int t = a->gpu[j];
                a->gpu[j] = a->gpu[j - 1];
                a->gpu[j - 1] = t;
            }
    return 0;
}

int ext_annot_fits(const struct core_request *r, const struct core_alloc *a, struct gs_err *e)
{
    static const char *const what[] = {"no GPU", "whole", "shared", "MIG"};
    int want = r->kind == CORE_REQ_MIG ? r->mig_count : r->num_gpu;
    if (r->kind == a->kind && want == a->n)
        return 0;
    return gs_errf(e, GS_EINVAL, "its assignment annotations (%s, %d GPUs) do not match its "
                   "request (%s, %d): not written by a bind, ignored", what[a->kind], a->n,
                   what[r->kind], want);
}
