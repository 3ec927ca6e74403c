/* ext/nodes.c - see nodes.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/nodes.h"
#include "kube/client.h"

#define INVENTORY_MAX (256u << 10)

static int int_field(const json_t *o, const char *k, long long lo, long long hi, long long def,
                     long long *out, const char *where, struct gs_err *e)
{
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return gs_errf(e, GS_EINVAL, "%s.%s: not an integer in %lld..%lld", where, k, lo, hi);
    *out = json_integer_value(v);
    return 0;
}

static int str_field(const json_t *o, const char *k, char *dst, size_t cap, int required,
                     const char *where, struct gs_err *e)
{
    const json_t *v = json_object_get(o, k);
    if (!v || json_is_null(v)) {
        if (required)
            return gs_errf(e, GS_EINVAL, "%s.%s: missing", where, k);
        dst[0] = '\0';
        return 0;
    }
    if (!json_is_string(v) || json_string_length(v) >= cap)
        return gs_errf(e, GS_EINVAL, "%s.%s: not a string of at most %zu characters", where, k,
                       cap - 1);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

static int parse_gpu(const json_t *g, int i, struct core_gpu_spec *out, struct gs_err *e)
{
    char where[32];
    long long v = 0;
    const json_t *links, *l, *mig, *m;
    size_t j;
    int rc;

    snprintf(where, sizeof where, "gpus[%d]", i);
    if (!json_is_object(g))
        return gs_errf(e, GS_EINVAL, "%s: not an object", where);
    memset(out, 0, sizeof *out);
    if ((rc = int_field(g, "index", 0, CORE_MAX_GPUS - 1, -1, &v, where, e)) < 0)
        return rc;
    if (v < 0)
        return gs_errf(e, GS_EINVAL, "%s.index: missing", where);
    out->index = (int)v;
    if ((rc = str_field(g, "uuid", out->uuid, sizeof out->uuid, 1, where, e)) < 0 ||
        (rc = str_field(g, "model", out->model, sizeof out->model, 1, where, e)) < 0 ||
        (rc = int_field(g, "memory_mib", 0, 1LL << 40, 0, &v, where, e)) < 0)
        return rc;
    out->mem_mib = v;
    if ((rc = int_field(g, "numa_node", -1, 1024, -1, &v, where, e)) < 0)
        return rc;
    out->numa = (int)v;
    const json_t *h = json_object_get(g, "healthy");
    if (h && !json_is_boolean(h))
        return gs_errf(e, GS_EINVAL, "%s.healthy: not a boolean", where);
    out->healthy = !h || json_is_true(h);
    const json_t *me = json_object_get(g, "mig_enabled");
    if (me && !json_is_boolean(me))
        return gs_errf(e, GS_EINVAL, "%s.mig_enabled: not a boolean", where);
    out->mig_enabled = json_is_true(me);
    links = json_object_get(g, "links");
    if (links && !json_is_array(links) && !json_is_null(links))
        return gs_errf(e, GS_EINVAL, "%s.links: not an array", where);
    json_array_foreach(links, j, l)
    {
        const json_t *peer = json_object_get(l, "gpu"), *type = json_object_get(l, "type");
        int link;
        if (!json_is_integer(peer) || json_integer_value(peer) < 0 ||
            json_integer_value(peer) >= CORE_MAX_GPUS)
            return gs_errf(e, GS_EINVAL, "%s.links[%zu].gpu: not a GPU index", where, j);
        if (!json_is_string(type) || (link = core_link_parse(json_string_value(type))) < 0)
            return gs_errf(e, GS_EINVAL, "%s.links[%zu].type: not one of nvlink, pix, pxb, phb, "
                                         "node, sys", where, j);
        out->link[json_integer_value(peer)] = (enum core_link)link;
    }
    mig = json_object_get(g, "mig");
    if (mig && !json_is_array(mig) && !json_is_null(mig))
        return gs_errf(e, GS_EINVAL, "%s.mig: not an array", where);
    if (json_array_size(mig) > CORE_MAX_MIG)
        return gs_errf(e, GS_EINVAL, "%s.mig: more than %d instances", where, CORE_MAX_MIG);
    json_array_foreach(mig, j, m)
    {
        char w2[48];
        struct core_mig_spec *ms = &out->mig[j];
        snprintf(w2, sizeof w2, "%s.mig[%zu]", where, j);
        if (!json_is_object(m))
            return gs_errf(e, GS_EINVAL, "%s: not an object", w2);
        if ((rc = str_field(m, "uuid", ms->uuid, sizeof ms->uuid, 1, w2, e)) < 0 ||
            (rc = str_field(m, "profile", ms->profile, sizeof ms->profile, 1, w2, e)) < 0 ||
            (rc = int_field(m, "memory_mib", 0, 1LL << 40, 0, &v, w2, e)) < 0)
            return rc;
        ms->mem_mib = v;
        const json_t *mh = json_object_get(m, "healthy");
        if (mh && !json_is_boolean(mh))
            return gs_errf(e, GS_EINVAL, "%s.healthy: not a boolean", w2);
        ms->unhealthy = mh && !json_is_true(mh);
        out->n_mig++;
    }
    return 0;
}

int ext_inventory_parse(const char *text, struct core_node_spec *spec, double *updated_at,
                        struct gs_err *e)
{
    json_error_t je;
    json_t *inv;
    const json_t *gpus, *g;
    size_t i;
    int rc = 0;
    unsigned seen = 0;

    *updated_at = 0;
    if (strlen(text) > INVENTORY_MAX)
        return gs_errf(e, GS_ETOOBIG, "inventory larger than %u bytes", INVENTORY_MAX);
    if (!(inv = json_loads(text, JSON_REJECT_DUPLICATES, &je)))
        return gs_errf(e, GS_EINVAL, "inventory is not JSON: %s", je.text);
    const json_t *ver = json_object_get(inv, "version");
    const json_t *upd = json_object_get(inv, "updated_at");
    if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
        rc = gs_errf(e, GS_EINVAL, "inventory.version: must be 1");
        goto out;
    }
    if (upd && (!json_is_string(upd) || kube_parse_time(json_string_value(upd), updated_at) < 0)) {
        rc = gs_errf(e, GS_EINVAL, "inventory.updated_at: not an RFC 3339 time");
        goto out;
    }
    gpus = json_object_get(inv, "gpus");
    if (!json_is_array(gpus)) {
        rc = gs_errf(e, GS_EINVAL, "inventory.gpus: missing or not an array");
        goto out;
    }
    if (json_array_size(gpus) > CORE_MAX_GPUS) {
        rc = gs_errf(e, GS_EINVAL, "inventory.gpus: more than %d GPUs", CORE_MAX_GPUS);
        goto out;
    }
    spec->n_gpus = 0;
    json_array_foreach(gpus, i, g)
    {
        if ((rc = parse_gpu(g, (int)i, &spec->gpus[i], e)) < 0)
            goto out;
        if (seen & (1u << spec->gpus[i].index)) {
            rc = gs_errf(e, GS_EINVAL, "gpus[%zu].index: %d appears twice", i, spec->gpus[i].index);
            goto out;
        }
        seen |= 1u << spec->gpus[i].index;
        spec->n_gpus++;
    }
out:
    json_decref(inv);
    return rc;
}

/* Fallback: N GPUs from capacity, model and memory from labels. */
static int gpus_from_capacity(const json_t *node, const char *name, const struct core_names *names,
                              struct core_node_spec *spec, struct gs_err *e)
{
    const json_t *st = json_object_get(node, "status");
    const json_t *cap = json_object_get(st, "capacity");
    const json_t *q = json_object_get(cap, names->gpu);
    const char *model = kube_label(node, "nvidia.com/gpu.product");
    const char *mem = kube_label(node, "nvidia.com/gpu.memory");
    int64_t n = 0, mib = 0;
    char field[300];

    if (!q)
        q = json_object_get(json_object_get(st, "allocatable"), names->gpu);
    if (!q || json_is_null(q))
        return 0;
    snprintf(field, sizeof field, "node %s: status.capacity[%s]", name, names->gpu);
    if (!json_is_string(q) ||
        core_quantity_parse(json_string_value(q), 1, &n, field, e) < 0 || n > CORE_MAX_GPUS)
        return gs_errf(e, GS_EINVAL, "%s: not a GPU count 0..%d", field, CORE_MAX_GPUS);
    if (!model)
        model = kube_label(node, "accelerator");
    if (mem) {
        char *end;
        mib = strtoll(mem, &end, 10);
        if (*end || mib < 0)
            return gs_errf(e, GS_EINVAL,
                           "node %s: label nvidia.com/gpu.memory: '%s' is not a MiB count", name,
                           mem);
    }
    spec->n_gpus = (int)n;
    for (int i = 0; i < (int)n; i++) {
        struct core_gpu_spec *g = &spec->gpus[i];
        memset(g, 0, sizeof *g);
        g->index = i;
        snprintf(g->uuid, sizeof g->uuid, "%.80s/gpu%d", name, i);
        snprintf(g->model, sizeof g->model, "%s", model ? model : "unknown");
        g->mem_mib = mib;
        g->healthy = 1;
        g->numa = -1;
    }
    return 0;
}

static int alloc_qty(const json_t *alloc, const char *key, int64_t scale, int64_t *out,
                     const char *name, struct gs_err *e)
{
    const json_t *v = json_object_get(alloc, key);
    char field[300];
    *out = 0;
    if (!v || json_is_null(v))
        return 0;
    snprintf(field, sizeof field, "node %s: status.allocatable.%s", name, key);
    if (json_is_integer(v) && json_integer_value(v) >= 0) {
        *out = json_integer_value(v) * scale;
        return 0;
    }
    if (!json_is_string(v))
        return gs_errf(e, GS_EINVAL, "%s: not a quantity", field);
    return core_quantity_parse(json_string_value(v), scale, out, field, e);
}

int ext_node_spec(const json_t *node, const struct core_names *names, struct core_node_spec *spec,
                  struct ext_node_buf *buf, double *updated_at, struct gs_err *e)
{
    const char *name = kube_meta_str(node, "name");
    const json_t *labels = json_object_get(json_object_get(node, "metadata"), "labels");
    const json_t *taints = json_object_get(json_object_get(node, "spec"), "taints");
    const json_t *alloc = json_object_get(json_object_get(node, "status"), "allocatable");
    char key[300];
    const char *k, *inv;
    json_t *v;
    size_t i;
    int64_t pods;
    int rc;

    memset(spec, 0, sizeof *spec);
    memset(buf, 0, sizeof *buf);
    *updated_at = 0;
    if (!name || !*name)
        return gs_errf(e, GS_EINVAL, "node: metadata.name missing");
    spec->name = name;
    if (json_is_object(labels) && json_object_size(labels)) {
        size_t n = json_object_size(labels);
        buf->keys = calloc(n, sizeof *buf->keys);
        buf->values = calloc(n, sizeof *buf->values);
        if (!buf->keys || !buf->values) {
            ext_node_buf_clear(buf);
            return gs_errf(e, GS_ENOMEM, "out of memory");
        }
        json_object_foreach((json_t *)labels, k, v)
        {
            if (!json_is_string(v))
                continue;
            buf->keys[spec->n_labels] = k;
            buf->values[spec->n_labels++] = json_string_value(v);
        }
        spec->label_keys = buf->keys;
        spec->label_values = buf->values;
    }
    if (json_is_array(taints) && json_array_size(taints)) {
        if (!(buf->taints = calloc(json_array_size(taints), sizeof *buf->taints))) {
            ext_node_buf_clear(buf);
            return gs_errf(e, GS_ENOMEM, "out of memory");
        }
        json_array_foreach(taints, i, v)
        {
            const json_t *tk = json_object_get(v, "key"), *tv = json_object_get(v, "value"),
                         *te = json_object_get(v, "effect");
            if (!json_is_string(tk) || !json_is_string(te)) {
                ext_node_buf_clear(buf);
                return gs_errf(e, GS_EINVAL, "node %s: spec.taints[%zu]: key and effect required",
                               name, i);
            }
            buf->taints[spec->n_taints].key = json_string_value(tk);
            buf->taints[spec->n_taints].value = json_is_string(tv) ? json_string_value(tv) : "";
            buf->taints[spec->n_taints++].effect = json_string_value(te);
        }
        spec->taints = buf->taints;
    }
    if ((rc = alloc_qty(alloc, "cpu", 1000, &spec->cpu_milli, name, e)) < 0 ||
        (rc = alloc_qty(alloc, "memory", 1, &spec->mem_bytes, name, e)) < 0 ||
        (rc = alloc_qty(alloc, "pods", 1, &pods, name, e)) < 0) {
        ext_node_buf_clear(buf);
        return rc;
    }
    spec->max_pods = pods > 1000000 ? 1000000 : (int)pods;
    snprintf(key, sizeof key, "%sgpu-inventory", names->annot_prefix);
    if ((inv = kube_annotation(node, key))) {
        if ((rc = ext_inventory_parse(inv, spec, updated_at, e)) < 0) {
            gs_err_prefix(e, "node %s: annotation %s", name, key);
            ext_node_buf_clear(buf);
            return rc;
        }
        return 0;
    }
    if ((rc = gpus_from_capacity(node, name, names, spec, e)) < 0)
        ext_node_buf_clear(buf);
    return rc;
}

void ext_node_buf_clear(struct ext_node_buf *buf)
{
    free(buf->keys);
    free(buf->values);
    free(buf->taints);
    memset(buf, 0, sizeof *buf);
}
