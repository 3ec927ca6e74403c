/* wh/wh_nodes.c - see wh_nodes.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube/watch.h"
#include "util/log.h"
#include "wh/wh_nodes.h"

struct entry {
    char *name;
    struct wh_cluster gpus; /* this node's largest GPU and count */
};

struct wh_nodes {
    const struct core_names *names;
    wh_nodes_publish publish;
    void *ud;
    struct entry *e;
    int n, cap;
    struct wh_cluster last; /* what was published */
    int published;
    struct kube_watch *w;
};

struct wh_nodes *wh_nodes_new(const struct core_names *names, wh_nodes_publish publish, void *ud)
{
    struct wh_nodes *t = calloc(1, sizeof *t);
    if (t) {
        t->names = names;
        t->publish = publish;
        t->ud = ud;
    }
    return t;
}

static int find(const struct wh_nodes *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->e[i].name, name) == 0)
            return i;
    return -1;
}

/* Recomputes the maximum over all nodes and publishes it when it moved. */
static void publish(struct wh_nodes *t)
{
    struct wh_cluster all = {0};
    for (int i = 0; i < t->n; i++)
        wh_cluster_merge(&all, &t->e[i].gpus);
    if (t->published && wh_cluster_same(&all, &t->last))
        return;
    t->last = all;
    t->published = 1;
    char kubelet[16] = "unknown";
    if (all.kubelet_minor > 0)
        snprintf(kubelet, sizeof kubelet, "1.%d", all.kubelet_minor);
    log_info("webhook", "cluster GPUs from the API server: largest %s %lld MiB, %d GPUs per node "
             "(%d nodes); oldest kubelet %s", all.max_gpu_model[0] ? all.max_gpu_model : "none",
             (long long)all.max_gpu_mem_mib, all.max_gpus_per_node, t->n, kubelet);
    t->publish(t->ud, &all);
}

static const char *node_name(const json_t *node)
{
    return json_string_value(json_object_get(json_object_get(node, "metadata"), "name"));
}

/* Sets (or, deleted, drops) one node's entry; 1 when the table changed. */
static int apply(struct wh_nodes *t, const json_t *node, int deleted)
{
    const char *name = node_name(node);
    struct gs_err e = GS_ERR_INIT;
    struct wh_cluster g;

    if (!name || !*name)
        return 0;
    int i = find(t, name);
    if (deleted) {
        if (i < 0)
            return 0;
        free(t->e[i].name);
        t->e[i] = t->e[--t->n];
        return 1;
    }
    if (wh_node_gpus(node, t->names, &g, &e) < 0) /* g: no GPUs, its kubelet */
        log_warn("webhook", "node %s: %s; counted without GPUs", name, e.msg);
    if (i >= 0) {
        if (wh_cluster_same(&t->e[i].gpus, &g))
            return 0;
        t->e[i].gpus = g;
        return 1;
    }
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 64;
        struct entry *ne = realloc(t->e, (size_t)cap * sizeof *ne);
        if (!ne)
            return 0;
        t->e = ne;
        t->cap = cap;
    }
    if (!(t->e[t->n].name = strdup(name)))
        return 0;
    t->e[t->n++].gpus = g;
    return 1;
}

void wh_nodes_replace(void *ud, const json_t *items, const char *rv)
{
    struct wh_nodes *t = ud;
    size_t i;
    json_t *node;
    (void)rv;
    for (int k = 0; k < t->n; k++)
        free(t->e[k].name);
    t->n = 0;
    json_array_foreach(items, i, node)
        apply(t, node, 0);
    publish(t);
}

void wh_nodes_event(void *ud, const char *type, const json_t *node)
{
    struct wh_nodes *t = ud;
    if (apply(t, node, strcmp(type, "DELETED") == 0))
        publish(t);
}

int wh_nodes_watch(struct kube_client *kc, const struct core_names *names,
                   wh_nodes_publish pub, void *ud, struct wh_nodes **out, struct gs_err *e)
{
    static const struct kube_watch_ops ops = {wh_nodes_replace, wh_nodes_event, NULL, NULL};
    struct wh_nodes *t = wh_nodes_new(names, pub, ud);
    int rc;
    if (!t)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    if ((rc = kube_watch_start(kc, &(struct kube_watch_opts){.path = "/api/v1/nodes"}, &ops, t,
                               &t->w, e)) < 0) {
        free(t);
        return rc;
    }
    *out = t;
    return 0;
}

void wh_nodes_free(struct wh_nodes *t)
{
    if (!t)
        return;
    kube_watch_stop(t->w);
    for (int i = 0; i < t->n; i++)
        free(t->e[i].name);
    free(t->e);
    free(t);
}
