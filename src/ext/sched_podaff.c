/*
 * ext/sched_podaff.c - a pod's preferred pod affinity and anti-affinity, and
 * its soft topology spread, counted by the extender itself; and the terms
 * of the pods already placed that pick it.
 *
 * deploy/ gives the extender weight 100 so that the policy decides where a
 * GPU pod goes; kube-scheduler's own InterPodAffinity and PodTopologySpread
 * scores (at most 100 and 200) could then never win, and a Deployment that
 * prefers its replicas on different nodes would have them packed on one.
 * So the core ranks nodes by the pod's terms before its policy
 * (core/framework.c, soft preferences), and this file gives it what each
 * node's score is made of:
 *  - for each of the pod's terms, the pods bound to a node in the node's
 *    topology domain (same value of the term's topologyKey) that the term
 *    picks: the GPU pods this replica holds an allocation for and the pods
 *    without GPUs of ours (sched_usage.c), as kube-scheduler counts every
 *    pod;
 *  - kube-scheduler's symmetric half: for each placed pod whose preferred
 *    podAffinity (+weight), podAntiAffinity (-weight) or required
 *    podAffinity term (+hardPodAffinityWeight: opts, default 1) picks this
 *    pod, the term's weight on every node of that pod's domain. So a pod that wants
 *    to be away from a kind of pod keeps it away, even when that pod says
 *    nothing itself. The placed pods with such terms (the owners) are kept
 *    parsed by UID; a pod's affinity cannot change, so each is parsed once.
 *    They are grouped by the namespace their terms pick in (their own,
 *    unless a term names namespaces or selects them): a pod walks only the
 *    owners of its namespace and those of any.
 *
 * Both are built once per pod (and its labels), cluster version and labels
 * generation (one decision asks for every candidate node; a placed pod
 * relabelled moves no version) and kept in s->podaff.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/cluster.h"
#include "ext/sched_int.h"

struct podaff_sum {
    char *value;    /* the topologyKey's value */
    long long sum;  /* picked pods in that domain */
};

/* Built in two steps: add() appends one entry per picked pod, its value
 * borrowed from the node (valid under the lock); merge() sorts them, sums
 * each value's entries and copies the values, once. Appending and sorting
 * costs O(n log n) in the pods picked, where a search per pod among the
 * domains cost pods x domains (10,000 pods over 1,000 hostnames: 20 ms). */
struct podaff_term {
    int n, cap;
    int owned;      /* merged: the values are copies */
    struct podaff_sum *sums;
};

struct podaff_key {         /* the owners' terms of one topologyKey */
    char *key;
    struct podaff_term domains; /* their summed weights per domain */
};

struct sched_podaff {
    char uid[64];        /* the pod the sums are for (its terms pick in ns) */
    char ns[CORE_NAME_MAX];
    json_t *labels;      /* its labels (a reference): what owners' terms pick */
    uint64_t version;    /* core_cluster_version they were built at */
    unsigned long labels_gen; /* and s->labels_gen */
    int n_terms;
    struct podaff_term *terms;
    int with_owners;     /* the owners were counted (pod_terms_obj given) */
    int n_keys;
    struct podaff_key *keys;
};

static void term_clear(struct podaff_term *t)
{
    for (int i = 0; t->owned && i < t->n; i++)
        free(t->sums[i].value);
    free(t->sums);
}

static void podaff_clear(struct sched_podaff *pa)
{
    for (int t = 0; t < pa->n_terms; t++)
        term_clear(&pa->terms[t]);
    free(pa->terms);
    for (int k = 0; k < pa->n_keys; k++) {
        free(pa->keys[k].key);
        term_clear(&pa->keys[k].domains);
    }
    free(pa->keys);
    json_decref(pa->labels);
    memset(pa, 0, sizeof *pa);
}

static int cmp_sum(const void *a, const void *b)
{
    return strcmp(((const struct podaff_sum *)a)->value, ((const struct podaff_sum *)b)->value);
}

/* Appends w for value (borrowed until merge()) to t. 0, or -1 out of
 * memory. */
static int add(struct podaff_term *t, const char *value, long long w)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        struct podaff_sum *ns = realloc(t->sums, (size_t)cap * sizeof *ns);
        if (!ns)
            return -1;
        t->sums = ns;
        t->cap = cap;
    }
    t->sums[t->n++] = (struct podaff_sum){(char *)value, w};
    return 0;
}

/* One entry per value, summed, sorted for bsearch in sum_at(), the values
 * copied. 0, or -1 out of memory (t then holds nothing). */
static int merge(struct podaff_term *t)
{
    int n = 0;
    if (t->n > 1) /* (qsort must not get NULL, even for 0) */
        qsort(t->sums, (size_t)t->n, sizeof *t->sums, cmp_sum);
    for (int i = 0; i < t->n; i++) {
        if (n > 0 && strcmp(t->sums[n - 1].value, t->sums[i].value) == 0)
            t->sums[n - 1].sum += t->sums[i].sum;
        else
            t->sums[n++] = t->sums[i];
    }
    t->n = n;
    for (int i = 0; i < n; i++)
        if (!(t->sums[i].value = strdup(t->sums[i].value))) {
            for (int j = 0; j < i; j++)
                free(t->sums[j].value);
            t->n = 0;
            return -1;
        }
    t->owned = 1;
    return 0;
}

/* Adds a placed pod (a Pod object: namespace and labels) on node to the
 * counts of each term of pod that picks it. 0, or -1 out of memory. */
static int add_pod(struct ext_sched *s, struct sched_podaff *pa, const struct core_pod *pod,
                   const char *node, const json_t *other)
{
    const struct core_node *m = core_cluster_find(s->c, node);
    for (int t = 0; m && t < pod->n_pod_terms; t++) {
        const struct core_pod_term *pt = &pod->pod_terms[t];
        const char *v = core_node_label(m, pt->topology_key);
        if (v && core_pod_term_picks(pod, pt, other) && add(&pa->terms[t], v, 1) < 0)
            return -1;
    }
    return 0;
}

struct other_ctx {
    struct ext_sched *s;
    struct sched_podaff *pa;
    const struct core_pod *pod;
};

/* sched_usage_each: a pod without GPUs of ours */
static int add_other(void *ud, const char *uid, const char *node, const json_t *other)
{
    struct other_ctx *x = ud;
    if (strcmp(uid, x->pod->uid) == 0)
        return 0;
    return add_pod(x->s, x->pa, x->pod, node, other);
}

/* The placed node of an owner: its allocation's, or where it counts
 * without GPUs of ours; NULL while it has none. */
static const char *placed_on(struct ext_sched *s, const char *uid)
{
    const struct core_alloc *a = core_alloc_find(s->c, uid);
    return a ? a->node : sched_usage_node(s, uid);
}

static int cmp_key(const void *a, const void *b)
{
    return strcmp(((const struct podaff_key *)a)->key, ((const struct podaff_key *)b)->key);
}

struct owner_group; /* the owners whose terms pick in one namespace */

/* A placed pod whose terms may pick others, in the group of the
 * namespace they pick in (at group->v[idx]). */
struct sched_owner {
    char key[64]; /* its key in s->owners */
    struct core_pod pod;
    struct owner_group *group;
    int idx;
};

struct owner_group {
    int n, cap;
    struct sched_owner **v;
};

#define ANY_NAMESPACE "*" /* (no namespace has a '*') */

/* What owner ow's terms that pick pod add, per topologyKey and domain, to
 * pa->keys. 0, or -1 out of memory. */
static int add_owner(struct ext_sched *s, struct sched_podaff *pa, const struct core_pod *pod,
                     const struct sched_owner *ow)
{
    const struct core_pod *o = &ow->pod;
    const struct core_node *m = NULL;
    int looked = 0;
    for (int t = 0; t < o->n_pod_terms; t++) {
        const struct core_pod_term *pt = &o->pod_terms[t];
        /* the pick first: most owners pick no given pod, and finding where
         * one is placed costs more */
        if (!core_pod_term_picks(o, pt, pod->pod_terms_obj))
            continue;
        if (!looked++) {
            const char *node = strcmp(ow->key, pod->uid) ? placed_on(s, ow->key) : NULL;
            m = node ? core_cluster_find(s->c, node) : NULL;
        }
        const char *v = m ? core_node_label(m, pt->topology_key) : NULL;
        if (!v)
            continue;
        int k = 0;
        while (k < pa->n_keys && strcmp(pa->keys[k].key, pt->topology_key) != 0)
            k++;
        if (k == pa->n_keys) {
            struct podaff_key *nk = realloc(pa->keys, (size_t)(k + 1) * sizeof *nk);
            if (!nk)
                return -1;
            pa->keys = nk;
            memset(&nk[k], 0, sizeof *nk);
            if (!(nk[k].key = strdup(pt->topology_key)))
                return -1;
            pa->n_keys++;
        }
        if (add(&pa->keys[k].domains, v, pt->weight) < 0)
            return -1;
    }
    return 0;
}

/* The owners' terms that pick pod (its object: pod->pod_terms_obj), summed
 * per topologyKey and domain into pa->keys: the owners of its namespace's
 * group and of the group of any. 0, or -1 out of memory. */
static int build_owners(struct ext_sched *s, struct sched_podaff *pa, const struct core_pod *pod)
{
    const struct owner_group *groups[2] = {sched_smap_get(&s->owner_groups, pod->ns),
                                           sched_smap_get(&s->owner_groups, ANY_NAMESPACE)};
    for (int g = 0; g < 2; g++)
        for (int i = 0; groups[g] && i < groups[g]->n; i++)
            if (add_owner(s, pa, pod, groups[g]->v[i]) < 0)
                return -1;
    return 0;
}

static const json_t *labels_of(const json_t *pod)
{
    return json_object_get(json_object_get(pod, "metadata"), "labels");
}

/* The counts for pod at the cluster's version: 0, or -1 out of memory
 * (the terms then count nothing). */
static int build(struct ext_sched *s, struct sched_podaff *pa, const struct core_pod *pod)
{
    uint64_t ver = core_cluster_version(s->c);
    const json_t *labels = labels_of(pod->pod_terms_obj);
    if (pa->uid[0] && pa->version == ver && pa->labels_gen == s->labels_gen &&
        strcmp(pa->uid, pod->uid) == 0 && strcmp(pa->ns, pod->ns) == 0 &&
        pa->n_terms == pod->n_pod_terms && pa->with_owners == (pod->pod_terms_obj != NULL)) {
        if (pa->labels == labels)
            return 0;
        if (pa->labels && labels && json_equal(pa->labels, labels)) {
            /* the same labels in this request's object: keep its reference,
             * so the next node's call compares pointers, not objects */
            json_decref(pa->labels);
            pa->labels = json_incref((json_t *)labels);
            return 0;
        }
    }
    podaff_clear(pa);
    if (!(pa->terms = calloc((size_t)pod->n_pod_terms + 1, sizeof *pa->terms)))
        return -1;
    pa->n_terms = pod->n_pod_terms;
    int n = pa->n_terms ? core_cluster_alloc_count(s->c) : 0;
    for (int i = 0; i < n; i++) {
        const struct core_alloc *a = core_cluster_alloc(s->c, i);
        const struct pod *p = sched_smap_get(&s->pods, a->pod_uid);
        if (!p || !p->obj || strcmp(a->pod_uid, pod->uid) == 0)
            continue;
        if (add_pod(s, pa, pod, a->node, p->obj) < 0)
            goto oom;
    }
    if ((pa->n_terms && sched_usage_each(s, add_other, &(struct other_ctx){s, pa, pod}) < 0) ||
        (pod->pod_terms_obj && build_owners(s, pa, pod) < 0))
        goto oom;
    for (int t = 0; t < pa->n_terms; t++)
        if (merge(&pa->terms[t]) < 0)
            goto oom;
    for (int k = 0; k < pa->n_keys; k++)
        if (merge(&pa->keys[k].domains) < 0)
            goto oom;
    if (pa->n_keys > 1)
        qsort(pa->keys, (size_t)pa->n_keys, sizeof *pa->keys, cmp_key);
    snprintf(pa->uid, sizeof pa->uid, "%s", pod->uid);
    snprintf(pa->ns, sizeof pa->ns, "%s", pod->ns);
    pa->labels = json_incref((json_t *)labels);
    pa->with_owners = pod->pod_terms_obj != NULL;
    pa->version = ver;
    pa->labels_gen = s->labels_gen;
    return 0;
oom:
    podaff_clear(pa);
    return -1;
}

/* The sum in t of the node's value of key (0 without one). */
static long long sum_at(const struct podaff_term *t, const struct core_node *nd, const char *key)
{
    struct podaff_sum k = {(char *)core_node_label(nd, key), 0};
    const struct podaff_sum *hit =
        k.value && t->n ? bsearch(&k, t->sums, (size_t)t->n, sizeof *t->sums, cmp_sum) : NULL;
    return hit ? hit->sum : 0;
}

/* s->podaff built for pod, or NULL out of memory. */
static struct sched_podaff *built(struct ext_sched *s, const struct core_pod *pod)
{
    if ((!s->podaff && !(s->podaff = calloc(1, sizeof *s->podaff))) ||
        build(s, s->podaff, pod) < 0)
        return NULL;
    return s->podaff;
}

/* core_pod.pod_terms_count. Lock held (every core call of a verb is made
 * under it). */
static long long count(void *ud, const struct core_pod *pod, const struct core_node *nd,
                       long long *counts)
{
    struct ext_sched *s = ud;
    struct sched_podaff *pa = built(s, pod);
    long long sym = 0;
    memset(counts, 0, (size_t)pod->n_pod_terms * sizeof *counts);
    if (!pa)
        return 0;
    for (int t = 0; t < pod->n_pod_terms; t++)
        counts[t] = sum_at(&pa->terms[t], nd, pod->pod_terms[t].topology_key);
    for (int k = 0; k < pa->n_keys; k++)
        sym += sum_at(&pa->keys[k].domains, nd, pa->keys[k].key);
    return sym;
}

/* core_pod.pod_terms_picked. Lock held. */
static int picked(void *ud, const struct core_pod *pod)
{
    struct sched_podaff *pa = built(ud, pod);
    return pa && pa->n_keys > 0;
}

void sched_podaff_attach(struct ext_sched *s, struct core_pod *pod, const json_t *obj)
{
    /* an owner placed after this read counts from the pod's next verb */
    int owners = atomic_load(&s->n_owners) > 0;
    if (pod->n_pod_terms > 0 || owners) {
        pod->pod_terms_count = count;
        pod->pod_terms_ud = s;
    }
    if (owners) {
        pod->pod_terms_picked = picked;
        pod->pod_terms_obj = obj;
    }
}

/* ---- the owners ------------------------------------------------------------ */

static int has_pod_terms(const json_t *obj)
{
    const json_t *aff = json_object_get(json_object_get(obj, "spec"), "affinity");
    return json_object_get(aff, "podAffinity") || json_object_get(aff, "podAntiAffinity");
}

/* The namespace owner o's terms pick in: its own, or any (ANY_NAMESPACE)
 * when a term names namespaces or selects them. */
static const char *picks_in(const struct core_pod *o)
{
    for (int t = 0; t < o->n_pod_terms; t++)
        if (o->pod_terms[t].all_namespaces || o->pod_terms[t].n_namespaces)
            return ANY_NAMESPACE;
    return o->ns;
}

static void owner_free(struct sched_owner *ow)
{
    core_pod_clear(&ow->pod);
    free(ow);
}

/* Adds ow to its namespace's group. 0, or -1 out of memory. */
static int group_add(struct ext_sched *s, struct sched_owner *ow)
{
    const char *ns = picks_in(&ow->pod);
    struct owner_group *g = sched_smap_get(&s->owner_groups, ns);
    if (!g) {
        if (!(g = calloc(1, sizeof *g)))
            return -1;
        if (sched_smap_put(&s->owner_groups, ns, g) < 0) {
            free(g);
            return -1;
        }
    }
    if (g->n == g->cap) {
        int cap = g->cap ? 2 * g->cap : 8;
        struct sched_owner **v = realloc(g->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        g->v = v;
        g->cap = cap;
    }
    ow->group = g;
    ow->idx = g->n;
    g->v[g->n++] = ow;
    return 0;
}

/* Takes ow out of its group (the last one moves to its place). */
static void group_del(struct ext_sched *s, struct sched_owner *ow)
{
    struct owner_group *g = ow->group;
    g->v[ow->idx] = g->v[--g->n];
    g->v[ow->idx]->idx = ow->idx;
    if (g->n == 0) {
        sched_smap_del(&s->owner_groups, picks_in(&ow->pod));
        free(g->v);
        free(g);
    }
}

void sched_podaff_owner_put(struct ext_sched *s, const char *uid, const json_t *obj)
{
    struct sched_owner *ow;
    if (!has_pod_terms(obj) || strlen(uid) >= sizeof ow->key ||
        sched_smap_get(&s->owners, uid) || !(ow = calloc(1, sizeof *ow)))
        return;
    snprintf(ow->key, sizeof ow->key, "%s", uid);
    /* a pod whose terms the parser refuses adds nothing, as kube-scheduler
     * would not have placed it */
    if (core_pod_affinity_parse(obj, s->opts.hard_pod_affinity_weight, &ow->pod, NULL) <= 0) {
        owner_free(ow);
        return;
    }
    if (group_add(s, ow) < 0) {
        owner_free(ow);
        return;
    }
    if (sched_smap_put(&s->owners, uid, ow) < 0) {
        group_del(s, ow);
        owner_free(ow);
        return;
    }
    atomic_store(&s->n_owners, (int)s->owners.n);
    s->labels_gen++; /* kept counts and /prioritize replies see it */
}

void sched_podaff_owner_drop(struct ext_sched *s, const char *uid)
{
    if (sched_smap_get(&s->pods, uid) || sched_usage_node(s, uid))
        return; /* still held */
    struct sched_owner *ow = sched_smap_del(&s->owners, uid);
    if (!ow)
        return;
    group_del(s, ow);
    owner_free(ow);
    atomic_store(&s->n_owners, (int)s->owners.n);
    s->labels_gen++;
}

void sched_podaff_free(struct ext_sched *s)
{
    if (s->podaff)
        podaff_clear(s->podaff);
    free(s->podaff);
    s->podaff = NULL;
    SMAP_FOREACH(&s->owners, it)
    {
        struct sched_owner *ow = sched_smap_del(&s->owners, it->key);
        group_del(s, ow);
        owner_free(ow);
    }
    free(s->owners.b);
    free(s->owner_groups.b);
}
