/* ext/proto.c - see proto.h. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "ext/proto.h"

json_t *ext_iget(const json_t *obj, const char *key)
{
    const char *k;
    json_t *v;
    if (!json_is_object(obj))
        return NULL;
    if ((v = json_object_get(obj, key)))
        return v;
    json_object_foreach((json_t *)obj, k, v)
    {
        if (strcasecmp(k, key) == 0)
            return v;
    }
    return NULL;
}

static int load(const char *body, size_t len, json_t **doc, struct gs_err *e)
{
    json_error_t je;
    if (!(*doc = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je)))
        return gs_errf(e, GS_EINVAL, "request body is not valid JSON: %s (line %d column %d)",
                       je.text, je.line, je.column);
    if (!json_is_object(*doc)) {
        json_decref(*doc);
        *doc = NULL;
        return gs_errf(e, GS_EINVAL, "request body must be a JSON object");
    }
    return 0;
}

static int get_pod(const json_t *doc, const json_t **pod, struct gs_err *e)
{
    const json_t *p = ext_iget(doc, "Pod"), *md;
    if (!p || json_is_null(p))
        return gs_errf(e, GS_EINVAL, "Pod: missing");
    if (!json_is_object(p))
        return gs_errf(e, GS_EINVAL, "Pod: not an object");
    md = json_object_get(p, "metadata");
    if (!json_is_object(md))
        return gs_errf(e, GS_EINVAL, "Pod.metadata: missing or not an object");
    if (!json_is_string(json_object_get(md, "name")) || !*json_string_value(json_object_get(md, "name")))
        return gs_errf(e, GS_EINVAL, "Pod.metadata.name: missing or not a string");
    *pod = p;
    return 0;
}

int ext_args_parse(const char *body, size_t len, struct ext_args *a, struct gs_err *e)
{
    const json_t *names, *nodes;
    int rc;

    memset(a, 0, sizeof *a);
    if ((rc = load(body, len, &a->doc, e)) < 0)
        return rc;
    if ((rc = get_pod(a->doc, &a->pod, e)) < 0)
        goto fail;
    names = ext_iget(a->doc, "NodeNames");
    nodes = ext_iget(a->doc, "Nodes");
    if (names && !json_is_null(names)) {
        if (!json_is_array(names)) {
            rc = gs_errf(e, GS_EINVAL, "NodeNames: not an array");
            goto fail;
        }
        a->n = (int)json_array_size(names);
        if (a->n && !(a->names = calloc((size_t)a->n, sizeof *a->names))) {
            rc = gs_errf(e, GS_ENOMEM, "out of memory");
            goto fail;
        }
        for (int i = 0; i < a->n; i++) {
            const json_t *s = json_array_get(names, (size_t)i);
            if (!json_is_string(s) || !*json_string_value(s)) {
                rc = gs_errf(e, GS_EINVAL, "NodeNames[%d]: not a node name", i);
                goto fail;
            }
            a->names[i] = json_string_value(s);
        }
        return 0;
    }
    if (nodes && !json_is_null(nodes)) {
        const json_t *items = json_is_object(nodes) ? ext_iget(nodes, "items") : NULL;
        if (!json_is_array(items) && !(json_is_object(nodes) && (!items || json_is_null(items)))) {
            rc = gs_errf(e, GS_EINVAL, "Nodes: not a NodeList with an items array");
            goto fail;
        }
        a->from_nodes = 1;
        a->n = (int)json_array_size(items);
        if (a->n && (!(a->names = calloc((size_t)a->n, sizeof *a->names)) ||
                     !(a->nodes = calloc((size_t)a->n, sizeof *a->nodes)))) {
            rc = gs_errf(e, GS_ENOMEM, "out of memory");
            goto fail;
        }
        for (int i = 0; i < a->n; i++) {
            const json_t *n = json_array_get(items, (size_t)i);
            const json_t *nm = json_object_get(json_object_get(n, "metadata"), "name");
            if (!json_is_object(n) || !json_is_string(nm) || !*json_string_value(nm)) {
                rc = gs_errf(e, GS_EINVAL, "Nodes.items[%d].metadata.name: missing or not a string",
                             i);
                goto fail;
            }
            a->names[i] = json_string_value(nm);
            a->nodes[i] = n;
        }
        return 0;
    }
    rc = gs_errf(e, GS_EINVAL, "NodeNames and Nodes: both missing or null");
fail:
    ext_args_clear(a);
    return rc;
}

void ext_args_clear(struct ext_args *a)
{
    free(a->names);
    free(a->nodes);
    json_decref(a->doc);
    memset(a, 0, sizeof *a);
}

static int req_str(const json_t *doc, const char *key, const char **out, struct gs_err *e)
{
    const json_t *v = ext_iget(doc, key);
    if (!v || json_is_null(v))
        return gs_errf(e, GS_EINVAL, "%s: missing", key);
    if (!json_is_string(v) || !*json_string_value(v))
        return gs_errf(e, GS_EINVAL, "%s: not a non-empty string", key);
    if (json_string_length(v) > 253)
        return gs_errf(e, GS_EINVAL, "%s: longer than 253 characters", key);
    *out = json_string_value(v);
    return 0;
}

int ext_bind_parse(const char *body, size_t len, struct ext_bind *b, struct gs_err *e)
{
    int rc;
    memset(b, 0, sizeof *b);
    if ((rc = load(body, len, &b->doc, e)) < 0)
        return rc;
    if ((rc = req_str(b->doc, "PodName", &b->pod_name, e)) < 0 ||
        (rc = req_str(b->doc, "PodNamespace", &b->pod_namespace, e)) < 0 ||
        (rc = req_str(b->doc, "PodUID", &b->pod_uid, e)) < 0 ||
        (rc = req_str(b->doc, "Node", &b->node, e)) < 0) {
        ext_bind_clear(b);
        return rc;
    }
    return 0;
}

void ext_bind_clear(struct ext_bind *b)
{
    json_decref(b->doc);
    memset(b, 0, sizeof *b);
}

/* One victims entry: {"Pods": [{"UID": ...} or full pods], "NumPDBViolations": n}. */
static int parse_victims(const char *node, const json_t *v, int meta, struct ext_victims *out,
                         struct gs_err *e)
{
    const json_t *pods = ext_iget(v, "Pods"), *pdb = ext_iget(v, "NumPDBViolations");
    out->node = node;
    if (!json_is_object(v))
        return gs_errf(e, GS_EINVAL, "victims of node %s: not an object", node);
    if (pods && !json_is_null(pods) && !json_is_array(pods))
        return gs_errf(e, GS_EINVAL, "victims of node %s: Pods is not an array", node);
    if (pdb && !json_is_null(pdb) && !json_is_integer(pdb))
        return gs_errf(e, GS_EINVAL, "victims of node %s: NumPDBViolations is not an integer",
                       node);
    out->pdb_violations = json_is_integer(pdb) ? (long)json_integer_value(pdb) : 0;
    out->n = (int)json_array_size(pods);
    if (out->n && !(out->uids = calloc((size_t)out->n, sizeof *out->uids)))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    for (int i = 0; i < out->n; i++) {
        const json_t *p = json_array_get(pods, (size_t)i);
        const json_t *uid = meta ? ext_iget(p, "UID")
                                 : json_object_get(json_object_get(p, "metadata"), "uid");
        if (!json_is_string(uid) || !*json_string_value(uid))
            return gs_errf(e, GS_EINVAL, "victims of node %s: Pods[%d]: %s missing", node, i,
                           meta ? "UID" : "metadata.uid");
        out->uids[i] = json_string_value(uid);
    }
    return 0;
}

int ext_preempt_parse(const char *body, size_t len, struct ext_preempt *p, struct gs_err *e)
{
    const json_t *map, *v;
    const char *k;
    int rc, meta = 1;

    memset(p, 0, sizeof *p);
    if ((rc = load(body, len, &p->doc, e)) < 0)
        return rc;
    if ((rc = get_pod(p->doc, &p->pod, e)) < 0)
        goto fail;
    map = ext_iget(p->doc, "NodeNameToMetaVictims");
    if (!map || json_is_null(map)) {
        map = ext_iget(p->doc, "NodeNameToVictims");
        meta = 0;
    }
    if (!map || json_is_null(map)) {
        rc = gs_errf(e, GS_EINVAL, "NodeNameToMetaVictims and NodeNameToVictims: both missing");
        goto fail;
    }
    if (!json_is_object(map)) {
        rc = gs_errf(e, GS_EINVAL, "%s: not an object",
                     meta ? "NodeNameToMetaVictims" : "NodeNameToVictims");
        goto fail;
    }
    if (json_object_size(map) &&
        !(p->nodes = calloc(json_object_size(map), sizeof *p->nodes))) {
        rc = gs_errf(e, GS_ENOMEM, "out of memory");
        goto fail;
    }
    json_object_foreach((json_t *)map, k, v)
    {
        if ((rc = parse_victims(k, v, meta, &p->nodes[p->n++], e)) < 0)
            goto fail;
    }
    return 0;
fail:
    ext_preempt_clear(p);
    return rc;
}

void ext_preempt_clear(struct ext_preempt *p)
{
    for (int i = 0; i < p->n; i++)
        free(p->nodes[i].uids);
    free(p->nodes);
    json_decref(p->doc);
    memset(p, 0, sizeof *p);
}
