/*
 * ext/sched_podaff.c - a pod's preferred pod affinity and anti-affinity, and
 * its soft topology spread, counted by the extender itself.
 *
 * deploy/ gives the extender weight 100 so that the policy decides where a
 * GPU pod goes; kube-scheduler's own InterPodAffinity and PodTopologySpread
 * scores (at most 100 and 200) could then never win, and a Deployment that
 * prefers its replicas on different nodes would have them packed on one.
 * So the core ranks nodes by the pod's terms before its policy
 * (core/framework.c, soft preferences), and this file gives it what each
 * node's score is made of: for each term, the pods bound to a node in the
 * node's topology domain (same value of the term's topologyKey) that the
 * term picks: the GPU pods this replica holds an allocation for and the
 * pods without GPUs of ours (sched_usage.c), as kube-scheduler counts every
 * pod. The terms of the pods already placed (kube-scheduler's symmetric
 * half of InterPodAffinity) do not count.
 *
 * The counts per domain are built once per pod, cluster version and labels
 * generation (one decision asks for every candidate node; a placed pod
 * relabelled moves no version) and kept in s->podaff.
 */
#include <stdlib.h>
#include <string.h>

#include "core/cluster.h"
#include "ext/sched_int.h"

struct podaff_sum {
    char *value;    /* the topologyKey's value */
    long long sum;  /* picked pods in that domain */
};

struct podaff_term {
    int n;
    struct podaff_sum *sums;
};

struct sched_podaff {
    char uid[64];        /* the pod the sums are for (its terms pick in ns) */
    char ns[CORE_NAME_MAX];
    uint64_t version;    /* core_cluster_version they were built at */
    unsigned long labels_gen; /* and s->labels_gen */
    int n_terms;
    struct podaff_term *terms;
};

static void podaff_clear(struct sched_podaff *pa)
{
    for (int t = 0; t < pa->n_terms; t++) {
        for (int i = 0; i < pa->terms[t].n; i++)
            free(pa->terms[t].sums[i].value);
        free(pa->terms[t].sums);
    }
    free(pa->terms);
    memset(pa, 0, sizeof *pa);
}

void sched_podaff_free(struct sched_podaff *pa)
{
    if (pa)
        podaff_clear(pa);
    free(pa);
}

static int add(struct podaff_term *t, const char *value)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->sums[i].value, value) == 0) {
            t->sums[i].sum++;
            return 0;
        }
    struct podaff_sum *ns = realloc(t->sums, (size_t)(t->n + 1) * sizeof *ns);
    if (!ns)
        return -1;
    t->sums = ns;
    if (!(ns[t->n].value = strdup(value)))
        return -1;
    ns[t->n++].sum = 1;
    return 0;
}

static int cmp_sum(const void *a, const void *b)
{
    return strcmp(((const struct podaff_sum *)a)->value, ((const struct podaff_sum *)b)->value);
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
        if (v && core_pod_term_picks(pod, pt, other) && add(&pa->terms[t], v) < 0)
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

/* The counts for pod at the cluster's version: 0, or -1 out of memory (the
 * terms then count nothing). */
static int build(struct ext_sched *s, struct sched_podaff *pa, const struct core_pod *pod)
{
    uint64_t ver = core_cluster_version(s->c);
    if (pa->terms && pa->version == ver && pa->labels_gen == s->labels_gen &&
        strcmp(pa->uid, pod->uid) == 0 &&
        strcmp(pa->ns, pod->ns) == 0 && pa->n_terms == pod->n_pod_terms)
        return 0;
    podaff_clear(pa);
    if (!(pa->terms = calloc((size_t)pod->n_pod_terms, sizeof *pa->terms)))
        return -1;
    pa->n_terms = pod->n_pod_terms;
    int n = core_cluster_alloc_count(s->c);
    for (int i = 0; i < n; i++) {
        const struct core_alloc *a = core_cluster_alloc(s->c, i);
        const struct pod *p = sched_smap_get(&s->pods, a->pod_uid);
        if (!p || !p->obj || strcmp(a->pod_uid, pod->uid) == 0)
            continue;
        if (add_pod(s, pa, pod, a->node, p->obj) < 0) {
            podaff_clear(pa);
            return -1;
        }
    }
    if (sched_usage_each(s, add_other, &(struct other_ctx){s, pa, pod}) < 0) {
        podaff_clear(pa);
        return -1;
    }
    for (int t = 0; t < pa->n_terms; t++) /* for bsearch in count() */
        if (pa->terms[t].n > 1) /* (qsort must not get NULL, even for 0) */
            qsort(pa->terms[t].sums, (size_t)pa->terms[t].n, sizeof *pa->terms[t].sums,
                  cmp_sum);
    snprintf(pa->uid, sizeof pa->uid, "%s", pod->uid);
    snprintf(pa->ns, sizeof pa->ns, "%s", pod->ns);
    pa->version = ver;
    pa->labels_gen = s->labels_gen;
    return 0;
}

/* core_pod.pod_terms_count. Lock held (every core call of a verb is made
 * under it). */
static void count(void *ud, const struct core_pod *pod, const struct core_node *nd,
                  long long *counts)
{
    struct ext_sched *s = ud;
    memset(counts, 0, (size_t)pod->n_pod_terms * sizeof *counts);
    if ((!s->podaff && !(s->podaff = calloc(1, sizeof *s->podaff))) ||
        build(s, s->podaff, pod) < 0)
        return;
    for (int t = 0; t < pod->n_pod_terms; t++) {
        struct podaff_sum key = {(char *)core_node_label(nd, pod->pod_terms[t].topology_key), 0};
        const struct podaff_term *pt = &s->podaff->terms[t];
        const struct podaff_sum *hit =
            key.value && pt->n ? bsearch(&key, pt->sums, (size_t)pt->n, sizeof *pt->sums, cmp_sum)
                               : NULL;
        counts[t] = hit ? hit->sum : 0;
    }
}

void sched_podaff_attach(struct ext_sched *s, struct core_pod *pod)
{
    if (pod->n_pod_terms > 0) {
        pod->pod_terms_count = count;
        pod->pod_terms_ud = s;
    }
}
