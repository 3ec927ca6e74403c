/*
 * ext/sched_nominated.c - the GPUs a preemption won stay for its pod.
 *
 * After a preemption kube-scheduler deletes the victims, writes the
 * preemptor's status.nominatedNodeName and schedules it again once they are
 * gone. Meanwhile it keeps pods of lower or equal priority off the CPU and
 * memory the nominated pod will need there (its filters run with the
 * nominated pods added), but not off its GPUs: the resources the extender
 * manages are ignoredByScheduler. So a lower-priority GPU pod that came in
 * between took the GPUs, and the preemptor preempted again.
 *
 * Here the extender does for GPUs what kube-scheduler does for CPU: a pod
 * asked about a node must fit there with the GPUs of every pod nominated to
 * that node whose priority is at least its own reserved first (a what-if,
 * taken back before the answer). A node where such a nominated pod does not
 * fit yet (its victims are still terminating) is refused to the pods it
 * outranks, as kube-scheduler refuses it when the nominated pod's CPU would
 * not fit. /filter, /bind (which also picks the pod's GPUs around theirs),
 * /debug/explain and the FailedScheduling summary use the same check.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "ext/sched_int.h"

struct held_pod {
    struct pod *p;                 /* borrowed: valid while the lock is held */
    struct core_pod cp;
    const struct core_policy *pol; /* what picks its GPUs when it binds */
    int reserved;                  /* its what-if allocation is in the core */
    int pos;                       /* its node's position (core_node_pos), -1: unknown */
};

struct sched_held {
    int n, cap;
    struct held_pod *v;
    unsigned char *at; /* by node position: some gathered pod is nominated there */
    int at_n, at_cap;  /* positions in at (nodes added since have none) */
};

static void held_clear(struct sched_held *h)
{
    for (int i = 0; i < h->n; i++)
        core_pod_clear(&h->v[i].cp);
    h->n = 0;
}

void sched_held_free(struct sched_held *h)
{
    if (h) {
        held_clear(h);
        free(h->v);
        free(h->at);
        free(h);
    }
}

/* kube-scheduler's nominator order for one node does not matter for what
 * fits; highest priority first, then by name, so that the reasons repeat */
static int by_priority(const void *a, const void *b)
{
    const struct held_pod *x = a, *y = b;
    if (x->cp.priority != y->cp.priority)
        return x->cp.priority < y->cp.priority ? 1 : -1;
    int c = strcmp(x->cp.ns, y->cp.ns);
    return c ? c : strcmp(x->cp.name, y->cp.name);
}

int sched_nominated_prepare(struct ext_sched *s, const struct core_pod *pod)
{
    if (s->held)
        held_clear(s->held);
    if (!s->nominated.n || pod->req.kind == CORE_REQ_NONE)
        return 0;
    if (!s->held && !(s->held = calloc(1, sizeof *s->held)))
        return 0; /* out of memory: nothing held, as before nominations were */
    struct sched_held *h = s->held;
    SMAP_FOREACH(&s->nominated, it)
    {
        struct pod *q = it->val;
        if ((strcmp(q->ns, pod->ns) == 0 && strcmp(q->name, pod->name) == 0) ||
            core_alloc_find(s->c, q->uid)) /* its allocation counts it already */
            continue;
        if (h->n == h->cap) {
            int cap = h->cap ? 2 * h->cap : 8;
            struct held_pod *v = realloc(h->v, (size_t)cap * sizeof *v);
            if (!v)
                break;
            h->v = v;
            h->cap = cap;
        }
        struct held_pod *hp = &h->v[h->n];
        if (core_pod_parse(q->obj, s->opts.names, &hp->cp, NULL) < 0)
            continue;
        if (hp->cp.req.kind == CORE_REQ_NONE || hp->cp.priority < pod->priority ||
            !hp->cp.uid[0]) {
            core_pod_clear(&hp->cp);
            continue;
        }
        hp->p = q;
        hp->pol = hp->cp.policy[0] ? core_policy_find(hp->cp.policy) : NULL;
        if (!hp->pol)
            hp->pol = s->policy;
        hp->reserved = 0;
        h->n++;
    }
    if (h->n > 1) /* (qsort must not get NULL, even for 0) */
        qsort(h->v, (size_t)h->n, sizeof *h->v, by_priority);
    /* their nodes, so that every other node is passed at a glance */
    int nn = core_cluster_node_count(s->c);
    if (h->n && nn >= h->at_cap) {
        unsigned char *at = realloc(h->at, (size_t)nn + 1);
        if (!at) {
            held_clear(h);
            return 0;
        }
        h->at = at;
        h->at_cap = nn + 1;
    }
    if (h->n)
        memset(h->at, 0, (size_t)nn);
    h->at_n = h->n ? nn : 0;
    for (int i = 0; i < h->n; i++) {
        const struct core_node *n = core_cluster_find(s->c, h->v[i].p->nominated);
        h->v[i].pos = n ? core_node_pos(n) : -1;
        if (n)
            h->at[h->v[i].pos] = 1;
    }
    return h->n;
}

int sched_nominated_hold(struct ext_sched *s, const struct core_node *n, struct gs_err *e)
{
    struct sched_held *h = s->held;
    for (int i = 0; h && i < h->n; i++) {
        struct held_pod *hp = &h->v[i];
        struct core_alloc a;
        struct gs_err pe = GS_ERR_INIT;
        if (hp->pos != core_node_pos(n))
            continue;
        if (core_pick_gpus(s->c, hp->pol, n, &hp->cp, &a, &pe) < 0 ||
            core_reserve_back(s->c, &a, &pe) < 0)
            return gs_errf(e, GS_ENOFIT,
                           "node kept for pod %s/%s (priority %d), nominated to it by a "
                           "preemption, which does not fit there yet: %s",
                           hp->cp.ns, hp->cp.name, (int)hp->cp.priority, pe.msg);
        hp->reserved = 1;
    }
    return 0;
}

void sched_nominated_undo(struct ext_sched *s)
{
    struct sched_held *h = s->held;
    for (int i = 0; h && i < h->n; i++)
        if (h->v[i].reserved) {
            core_unreserve(s->c, h->v[i].cp.uid, NULL);
            h->v[i].reserved = 0;
        }
}

/* The first gathered pod nominated to n (the highest priority), or NULL. */
static const struct held_pod *first_on(const struct sched_held *h, const struct core_node *n)
{
    for (int i = 0; h && i < h->n; i++)
        if (h->v[i].pos == core_node_pos(n))
            return &h->v[i];
    return NULL;
}

int sched_nominated_fit(struct ext_sched *s, const struct core_pod *pod, const struct core_node *n,
                        struct core_status *st)
{
    const struct sched_held *h = s->held;
    int at = core_node_pos(n);
    if (!h || !h->n || at < 0 || at >= h->at_n || !h->at[at])
        return 1;
    const struct held_pod *hp = first_on(h, n); /* marked: there is one */
    struct gs_err e = GS_ERR_INIT;
    struct core_status fst;
    int fits = 1;
    if (sched_nominated_hold(s, n, &e) < 0) {
        fits = 0;
    } else if (!core_filter(s->c, n, pod, &fst)) {
        fits = 0;
        gs_errf(&e, GS_ENOFIT,
                "GPUs kept for pod %s/%s (priority %d), nominated to this node by a "
                "preemption: %s",
                hp->cp.ns, hp->cp.name, (int)hp->cp.priority, fst.reason);
    }
    sched_nominated_undo(s);
    if (!fits) {
        snprintf(st->reason, sizeof st->reason, "%.*s", (int)sizeof st->reason - 1, e.msg);
        st->code = CORE_UNSCHEDULABLE; /* until the nominated pod binds or goes */
        st->plugin = "NominatedPods";
    }
    return fits;
}
