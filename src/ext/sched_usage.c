/*
 * ext/sched_usage.c - the CPU, memory and pod slots that the pods holding
 * no GPUs of ours take on each node.
 *
 * kube-scheduler and kubelet count every pod bound to a node against its
 * allocatable: DaemonSets, CPU-only jobs, pods another scheduler or a user
 * placed. The core counts the allocations the extender holds, so without
 * the others a node whose CPU they had taken looked empty: cpufrag's
 * stranded-CPU term and FGD's fragmentation saw its GPUs as usable by pods
 * that need CPU, which is what those policies exist to tell apart. Here
 * each such pod is kept by UID with its node and what it asks, summed per
 * node, and the sums go to the core (core_cluster_set_others). A pod counts
 * from when it names a node until it is done (kube_pod_done) or deleted.
 * Its namespace and labels are kept too: preferred pod (anti-)affinity and
 * spread terms pick such pods as kube-scheduler does (sched_podaff.c).
 */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "ext/sched_int.h"

struct usage_node {        /* s->usage_nodes: node name -> sums */
    __int128 cpu, mem;     /* exact: each pod may ask up to INT64_MAX */
    int pods;
    char name[];
};

struct usage_pod {         /* s->usage_pods: uid -> what one pod asks */
    struct usage_node *node;
    int64_t cpu, mem;
    json_t *meta;          /* {"metadata": {"namespace", "labels"}}: what pod
                              (anti-)affinity terms match (sched_podaff.c) */
};

static void usage_pod_free(struct usage_pod *p)
{
    if (p)
        json_decref(p->meta);
    free(p);
}

/* The part of a Pod object that core_pod_term_picks reads. */
static json_t *meta_of(const json_t *pod)
{
    const json_t *md = json_object_get(pod, "metadata");
    const json_t *ns = json_object_get(md, "namespace"), *labels = json_object_get(md, "labels");
    json_t *m = json_object();
    if (json_is_string(ns))
        json_object_set(m, "namespace", (json_t *)ns);
    if (json_is_object(labels) && json_object_size(labels))
        json_object_set(m, "labels", (json_t *)labels);
    return json_pack("{s:o}", "metadata", m);
}

static int labels_empty(const json_t *l)
{
    return !json_is_object(l) || json_object_size(l) == 0;
}

int sched_labels_same(const json_t *a, const json_t *b)
{
    const json_t *la = json_object_get(json_object_get(a, "metadata"), "labels");
    const json_t *lb = json_object_get(json_object_get(b, "metadata"), "labels");
    return labels_empty(la) ? labels_empty(lb) : json_equal(la, lb);
}

static int64_t clamp(__int128 v)
{
    return v > CORE_OTHERS_MAX ? CORE_OTHERS_MAX : (int64_t)v;
}

static void push(struct ext_sched *s, const char *node, const struct usage_node *u)
{
    /* a node not in the core yet gets its sums when it comes
     * (sched_usage_push); sums past what any node holds are cut to the
     * core's bound, which refuses every pod there all the same */
    core_cluster_set_others(s->c, node, u ? clamp(u->cpu) : 0, u ? clamp(u->mem) : 0,
                            u ? u->pods : 0, NULL);
}

void sched_usage_push(struct ext_sched *s, const char *node)
{
    push(s, node, sched_smap_get(&s->usage_nodes, node));
}

const char *sched_usage_node(const struct ext_sched *s, const char *uid)
{
    const struct usage_pod *p = sched_smap_get(&s->usage_pods, uid);
    return p ? p->node->name : NULL;
}

void sched_usage_drop(struct ext_sched *s, const char *uid)
{
    struct usage_pod *p = sched_smap_del(&s->usage_pods, uid);
    if (!p)
        return;
    sched_podaff_owner_drop(s, uid);
    struct usage_node *u = p->node;
    u->cpu -= p->cpu;
    u->mem -= p->mem;
    usage_pod_free(p);
    if (--u->pods > 0) {
        push(s, u->name, u);
        return;
    }
    sched_smap_del(&s->usage_nodes, u->name);
    push(s, u->name, NULL);
    free(u);
}

void sched_usage_put(struct ext_sched *s, const json_t *pod, const char *uid, const char *node,
                     int64_t cpu, int64_t mem)
{
    struct usage_pod *p = sched_smap_get(&s->usage_pods, uid);
    if (p && strcmp(p->node->name, node) == 0 && p->cpu == cpu && p->mem == mem) {
        /* the usual case: a status update; labels may have changed */
        json_t *m = sched_labels_same(p->meta, pod) ? NULL : meta_of(pod);
        if (m) {
            json_decref(p->meta);
            p->meta = m;
            s->labels_gen++;
        }
        return;
    }
    sched_usage_drop(s, uid);
    struct usage_node *u = sched_smap_get(&s->usage_nodes, node);
    if (!u) {
        size_t len = strlen(node) + 1;
        if (!(u = calloc(1, sizeof *u + len)))
            return;
        memcpy(u->name, node, len);
        if (sched_smap_put(&s->usage_nodes, node, u) < 0) {
            free(u);
            return;
        }
    }
    json_t *meta = meta_of(pod);
    if (!meta || !(p = malloc(sizeof *p)) || sched_smap_put(&s->usage_pods, uid, p) < 0) {
        json_decref(meta);
        free(p);
        if (!u->pods) {
            sched_smap_del(&s->usage_nodes, node);
            free(u);
        }
        return;
    }
    *p = (struct usage_pod){u, cpu, mem, meta};
    sched_podaff_owner_put(s, uid, pod);
    u->cpu += cpu;
    u->mem += mem;
    u->pods++;
    push(s, node, u);
}

void sched_usage_clear(struct ext_sched *s)
{
    SMAP_FOREACH(&s->usage_pods, it)
    {
        char *uid = strdup(it->key); /* (out of memory: its terms stay, never placed) */
        usage_pod_free(sched_smap_del(&s->usage_pods, it->key));
        if (uid)
            sched_podaff_owner_drop(s, uid);
        free(uid);
    }
    SMAP_FOREACH(&s->usage_nodes, it)
    {
        struct usage_node *u = sched_smap_del(&s->usage_nodes, it->key);
        push(s, u->name, NULL);
        free(u);
    }
}

void sched_usage_without(struct ext_sched *s, const char *node, const char *const *uids, int n)
{
    struct usage_node *u = sched_smap_get(&s->usage_nodes, node);
    if (!u)
        return;
    struct usage_node less = *u;
    for (int i = 0; i < n; i++) {
        const struct usage_pod *p = sched_smap_get(&s->usage_pods, uids[i]);
        if (p && p->node == u) {
            less.cpu -= p->cpu;
            less.mem -= p->mem;
            less.pods--;
        }
    }
    push(s, node, &less);
}

int sched_usage_each(struct ext_sched *s,
                     int (*fn)(void *ud, const char *uid, const char *node, const json_t *pod),
                     void *ud)
{
    SMAP_FOREACH(&s->usage_pods, it)
    {
        const struct usage_pod *p = it->val;
        int rc = fn(ud, it->key, p->node->name, p->meta);
        if (rc)
            return rc;
    }
    return 0;
}
