/*
 * ext/sched_preempt.c - preemption for GPU pods, two ways in:
 *
 * - /preempt (kube-scheduler's PostFilter preemption): per node offered,
 *   kube-scheduler's victims plus the GPU pods that must also go for the pod
 *   to fit beside the pods nominated there that it must leave room for, or
 *   the node dropped.
 * - from /filter (opts.filter_preemption): kube-scheduler 1.22+ never asks
 *   /preempt when GPUs alone keep a pod out (its dry run fits the pod on
 *   every node it passed, with no victim, since the GPU resources are
 *   ignoredByScheduler). So when no node fits, the extender chooses the
 *   victims and the node as kube-scheduler would, has them deleted and the
 *   pod nominated there (commit.preempt), and keeps the node for the pod
 *   (sched_nominated.c) until it binds, or until EXT_PREEMPT_KEEP_S after
 *   the victims let go of their GPUs (at the latest, their grace period
 *   and twice that after the decision): kube-scheduler may clear the
 *   nomination it was given before it retries the pod.
 *
 * Both spare the pods a PodDisruptionBudget protects where they can
 * (ext/pdbs.h; cluster mode watches the budgets).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "ext/memo.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "ext/sched_int.h"
#include "util/log.h"

/* A preemption /filter started: the victims it waits for. */
struct sched_preempting {
    char node[CORE_NAME_MAX];
    int n;
    char uid[EXT_MAX_VICTIMS][64];
    double gone_at;  /* wall clock: when the last victim let go of its GPUs (0: not yet) */
    double deadline; /* wall clock: ends then whatever the victims do (one that never
                        goes: its node lost, a finalizer, a delete that failed) */
    unsigned long gen; /* ext_preemption.gen */
};

/* ---- disruption budgets ------------------------------------------------------ */

int ext_sched_upsert_pdb(struct ext_sched *s, const json_t *obj, struct gs_err *e)
{
    pthread_mutex_lock(&s->mu);
    int rc = ext_pdbs_upsert(s->pdbs, obj, e);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

void ext_sched_remove_pdb(struct ext_sched *s, const char *ns, const char *name)
{
    pthread_mutex_lock(&s->mu);
    ext_pdbs_remove(s->pdbs, ns, name);
    pthread_mutex_unlock(&s->mu);
}

int ext_sched_replace_pdbs(struct ext_sched *s, const json_t *items)
{
    struct ext_pdbs *b = ext_pdbs_new(); /* read outside the lock, then swapped in */
    int bad = b ? ext_pdbs_replace(b, items) : (int)json_array_size(items);
    pthread_mutex_lock(&s->mu);
    if (b) {
        struct ext_pdbs *old = s->pdbs;
        s->pdbs = b;
        b = old;
        s->pdbs_pending = 0;
    }
    pthread_mutex_unlock(&s->mu);
    ext_pdbs_free(b);
    return bad;
}

void ext_sched_pdbs_pending(struct ext_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->pdbs_pending = 1;
    pthread_mutex_unlock(&s->mu);
}

/* The guard of core_preempt: the budgets, with kube-scheduler's victims
 * (gone) counted as evicted. */
struct guard_ud {
    struct ext_sched *s;
    const char *const *gone;
    int ngone;
};

static const json_t *pod_obj(struct ext_sched *s, const char *uid)
{
    const struct pod *q = sched_smap_get(&s->pods, uid);
    return q ? q->obj : NULL;
}

/* kube-scheduler's GetPodStartTime: status.startTime, else now (a pod not
 * started yet, or not known, counts as the latest). */
static double start_of(const struct pod *q, double now)
{
    return q && q->start ? q->start : now;
}

/* A candidate in kube-scheduler's order of importance (MoreImportantPod:
 * higher priority, then the earlier start). */
struct ranked {
    const json_t *obj;
    int32_t priority;
    double start;
    int at;                    /* its index in the core's order */
};

static int cmp_importance(const void *x, const void *y)
{
    const struct ranked *a = x, *b = y;
    if (a->priority != b->priority)
        return a->priority > b->priority ? -1 : 1;
    if (a->start != b->start)
        return a->start < b->start ? -1 : 1;
    return a->at - b->at;
}

static void guard_mark(void *ud, const struct core_alloc *const *cand, int n, unsigned char *viol)
{
    struct guard_ud *g = ud;
    const json_t **objs = calloc((size_t)(n + g->ngone) + 1, sizeof *objs);
    struct ranked *r = calloc((size_t)n + 1, sizeof *r);
    unsigned char *rv = calloc((size_t)n + 1, 1);
    double now = sched_wall_now();
    if (!objs || !r || !rv)
        goto out;
    for (int k = 0; k < g->ngone; k++)
        objs[n + k] = pod_obj(g->s, g->gone[k]);
    /* the budgets go to the most important pods first, as kube-scheduler's
     * do: the core's order within a priority is its own (larger holders
     * first as victims) */
    for (int i = 0; i < n; i++) {
        const struct pod *q = sched_smap_get(&g->s->pods, cand[i]->pod_uid);
        r[i].obj = q ? q->obj : NULL;
        r[i].priority = cand[i]->priority;
        r[i].start = start_of(q, now);
        r[i].at = i;
    }
    qsort(r, (size_t)n, sizeof *r, cmp_importance);
    for (int i = 0; i < n; i++)
        objs[i] = r[i].obj;
    ext_pdbs_mark(g->s->pdbs, objs + n, g->ngone, objs, n, rv);
    for (int i = 0; i < n; i++)
        viol[r[i].at] = rv[i];
out:
    free(objs);
    free(r);
    free(rv);
}

/* The GPU pods beyond gone[0..ngone) (taken off first: kube-scheduler's
 * victims) that must leave n for pod to fit there beside the pods nominated
 * there that it must leave room for (held: sched_nominated_prepare found
 * some) and within its namespace's quota (quota: it has one), sparing the
 * pods a disruption budget protects where it can. Returns how many, their
 * allocations copied to out[0..max) and how many of them a budget protects
 * in *nviol, or -1 when the pod cannot fit there. The cluster is left as it
 * was. Lock held. */
static int node_victims(struct ext_sched *s, struct core_node *n, const struct core_pod *pod,
                        int held, int quota, const char *const *gone, int ngone,
                        struct core_alloc *out, int max, int *nviol)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_alloc *saved = calloc((size_t)ngone + 1, sizeof *saved);
    int nsaved = 0, ok = 1, nmore = 0;
    if (!saved)
        return -1;
    /* take kube-scheduler's victims off first, as it will */
    for (int k = 0; k < ngone; k++) {
        const struct core_alloc *al = core_alloc_find(s->c, gone[k]);
        if (al && strcmp(al->node, n->name) == 0) {
            saved[nsaved++] = *al;
            core_unreserve(s->c, gone[k], NULL);
        }
    }
    /* and its victims without GPUs (ext/sched_usage.c) */
    if (ngone)
        sched_usage_without(s, n->name, gone, ngone);
    /* the pods nominated there that it must leave room for hold their GPUs
     * (sched_nominated.c): a node one of them does not fit yet is theirs */
    if (held && sched_nominated_hold(s, n, NULL) < 0)
        ok = 0;
    *nviol = 0;
    if (ok && pod->req.kind != CORE_REQ_NONE && !core_filter(s->c, n, pod, NULL)) {
        const char *victims[EXT_MAX_VICTIMS];
        int nv = 0;
        struct guard_ud gu = {s, gone, ngone};
        struct core_preempt_guard guard = {guard_mark, &gu};
        if (core_preempt(s->c, n, pod, ext_pdbs_count(s->pdbs) ? &guard : NULL, victims,
                         max < EXT_MAX_VICTIMS ? max : EXT_MAX_VICTIMS, &nv, nviol, &e) == 0) {
            for (int k = 0; k < nv; k++)
                out[nmore++] = *core_alloc_find(s->c, victims[k]);
        } else {
            ok = 0;
        }
    }
    /* kubelet's device count with every victim gone: the core's victims
     * free GPU capacity, which is not always a device (victims are not
     * chosen for devices; such a node is dropped); and the quota, counted
     * without them */
    for (int k = 0; k < nmore; k++)
        core_unreserve(s->c, out[k].pod_uid, NULL);
    if (ok && !sched_devices_fit(s, n, pod, NULL))
        ok = 0;
    sched_nominated_undo(s);
    if (ok && quota) { /* as /filter counts it: without the nominated pods */
        sched_quota_prepare(s, pod);
        ok = !sched_quota_blocks(s, pod, n, &e);
    }
    for (int k = 0; k < nmore; k++)
        core_reserve_back(s->c, &out[k], NULL);
    for (int k = 0; k < nsaved; k++)
        core_reserve_back(s->c, &saved[k], NULL);
    free(saved);
    if (quota && nmore + nsaved)
        sched_quota_prepare(s, pod);
    if (ngone)
        sched_usage_push(s, n->name);
    return ok ? nmore : -1;
}

/* Whether pod p holds its GPUs already: bound (or binding) with them, not
 * an orphaned assignment its /filter drops. kube-scheduler 1.20 schedules
 * such a pod again after a bind it saw fail though the Binding was made
 * (fixed by kubernetes#96582 in 1.21): its own GPUs then look taken, and a
 * preemption for it would delete pods for nothing. */
static int placed(struct ext_sched *s, const struct pod *p)
{
    return core_alloc_find(s->c, p->uid) && !sched_pod_orphaned(s, p);
}

int ext_sched_preempt(struct ext_sched *s, const char *body, size_t len, struct ext_reply *rep)
{
    json_t **reply = &rep->json;
    memset(rep, 0, sizeof *rep);
    struct gs_err e = GS_ERR_INIT;
    struct ext_preempt pa;
    struct core_pod pod;
    const struct core_policy *pol;

    if (ext_preempt_parse(body, len, &pa, &e) < 0) {
        *reply = ext_error("%s", e.msg);
        sched_decision(s, "preempt", "bad_request");
        return 400;
    }
    if (sched_pod_and_policy(s, pa.pod, &pod, &pol, reply) < 0) {
        /* ExtenderPreemptionResult has no Error: a 200 would read as "no
         * candidate" in silence, a 500 fails the preemption with a log line */
        const char *why = json_string_value(json_object_get(*reply, "error"));
        log_warn("extender", "preempt refused: %s", why ? why : "bad pod");
        ext_preempt_clear(&pa);
        sched_decision(s, "preempt", "error");
        return 500;
    }
    json_t *out = json_object();
    struct core_alloc *more = calloc(EXT_MAX_VICTIMS, sizeof *more);
    pthread_mutex_lock(&s->mu);
    /* a preemption /filter started for it is under way: none on top */
    struct pod *p = pod.uid[0] ? sched_smap_get(&s->pods, pod.uid)
                               : sched_find_by_name(s, pod.ns, pod.name);
    int busy = p && (sched_preempting(p) || placed(s, p));
    int held = busy ? 0 : sched_nominated_prepare(s, &pod);
    for (int i = 0; more && !busy && i < pa.n; i++) {
        struct ext_victims *v = &pa.nodes[i];
        struct core_node *n = core_cluster_find(s->c, v->node);
        if (!n)
            continue;
        int nviol = 0;
        int nmore = node_victims(s, n, &pod, held, 0, (const char *const *)v->uids, v->n, more,
                                 EXT_MAX_VICTIMS, &nviol);
        if (nmore < 0 || v->n + nmore == 0)
            continue;
        json_t *pods = json_array();
        for (int k = 0; k < v->n; k++)
            json_array_append_new(pods, json_pack("{s:s}", "UID", v->uids[k]));
        for (int k = 0; k < nmore; k++)
            json_array_append_new(pods, json_pack("{s:s}", "UID", more[k].pod_uid));
        /* kube-scheduler's count for its victims, plus the extender's */
        json_object_set_new(out, v->node, json_pack("{s:o, s:I}", "Pods", pods,
                                                    "NumPDBViolations",
                                                    (json_int_t)v->pdb_violations + nviol));
    }
    pthread_mutex_unlock(&s->mu);
    free(more);
    sched_decision(s, "preempt", json_object_size(out) ? "victims" : "none");
    core_pod_clear(&pod);
    ext_preempt_clear(&pa);
    *reply = json_pack("{s:o}", "NodeNameToMetaVictims", out);
    return 200;
}

/* ---- from /filter ----------------------------------------------------------- */

const char *sched_preempting(const struct pod *p) { return p->pre ? p->pre->node : NULL; }

int sched_preempting_is(const struct pod *p, unsigned long gen)
{
    return p && p->pre && p->pre->gen == gen;
}

void sched_preempt_drop(struct ext_sched *s, struct pod *p) { free(sched_preempt_take(s, p)); }

void sched_preempt_unwait(struct pod *p, const struct ext_preemption *pr)
{
    struct sched_preempting *rec = p->pre;
    for (int i = 0; i < pr->n; i++)
        for (int k = 0; pr->v[i].failed && k < rec->n; k++)
            if (strcmp(rec->uid[k], pr->v[i].uid) == 0) {
                memmove(rec->uid[k], rec->uid[k + 1], (size_t)(rec->n - k - 1) * sizeof rec->uid[k]);
                rec->n--;
                break;
            }
}

/* Is node `name` gone from the cluster, or one that this /filter (pos,
 * fit: its nodes' positions and verdicts) found can never take the pod? */
static int node_lost(struct ext_sched *s, const char *name, const int *pos,
                     const unsigned char *fit, int n)
{
    const struct core_node *node = core_cluster_find(s->c, name);
    if (!node)
        return 1;
    for (int i = 0; i < n; i++)
        if (pos[i] >= 0 && pos[i] == core_node_pos(node))
            return fit[i] == EXT_FIT_NEVER;
    return 0;
}

/* kube-scheduler's PodEligibleToPreemptOthers: a pod that asks never to
 * preempt does not, nor one nominated to a node where a pod of lower
 * priority still terminates (a preemption under way), unless that node is
 * lost to it. */
static int may_preempt(struct ext_sched *s, const struct pod *p, const struct core_pod *pod,
                       const json_t *obj, const int *pos, const unsigned char *fit, int n)
{
    const char *never =
        json_string_value(json_object_get(json_object_get(obj, "spec"), "preemptionPolicy"));
    if (never && strcmp(never, "Never") == 0)
        return 0;
    if (!p->nominated[0] || node_lost(s, p->nominated, pos, fit, n))
        return 1;
    SMAP_FOREACH(&s->pods, it)
    {
        const struct pod *q = it->val;
        const json_t *spec = json_object_get(q->obj, "spec");
        const char *node = json_string_value(json_object_get(spec, "nodeName"));
        if (node && strcmp(node, p->nominated) == 0 &&
            json_object_get(json_object_get(q->obj, "metadata"), "deletionTimestamp") &&
            json_integer_value(json_object_get(spec, "priority")) < pod->priority)
            return 0;
    }
    return 1;
}

/* kube-scheduler's pickOneNodeForPreemption: the fewest victims a
 * disruption budget protects, then the lowest highest victim priority, then
 * the lowest sum of priorities (each offset by 2^31, so that more victims
 * weigh more), then the fewest, then the latest start of the earliest
 * started victim of the highest priority. */
struct victims_key {
    int viol;
    int32_t top;
    int64_t sum;
    int n;
    double start;
};

static struct victims_key key_of(struct ext_sched *s, const struct core_alloc *v, int n,
                                 int viol, double now)
{
    struct victims_key k = {viol, INT32_MIN, 0, n, 0};
    for (int i = 0; i < n; i++) {
        if (v[i].priority > k.top)
            k.top = v[i].priority;
        k.sum += (int64_t)v[i].priority + ((int64_t)1 << 31);
    }
    k.start = now;
    for (int i = 0; i < n; i++) {
        double t = v[i].priority == k.top ? start_of(sched_smap_get(&s->pods, v[i].pod_uid), now)
                                          : now;
        if (t < k.start)
            k.start = t;
    }
    return k;
}

static int key_less(struct victims_key a, struct victims_key b)
{
    if (a.viol != b.viol)
        return a.viol < b.viol;
    if (a.top != b.top)
        return a.top < b.top;
    if (a.sum != b.sum)
        return a.sum < b.sum;
    if (a.n != b.n)
        return a.n < b.n;
    return a.start > b.start;
}

/* A preemption under way whose node is gone, or can never take the pod
 * now (kube-scheduler's rule: a nominated node that is unresolvable lets
 * the pod preempt again), is over. 1 when p has one still under way. */
static int still_preempting(struct ext_sched *s, struct pod *p, const int *pos,
                            const unsigned char *fit, int n)
{
    if (!p->pre)
        return 0;
    if (!node_lost(s, p->pre->node, pos, fit, n))
        return 1;
    sched_preempt_drop(s, p);
    sched_track_nomination(s, p);
    return 0;
}

/* The longest terminationGracePeriodSeconds of the victims (30 when unset). */
static double grace_of(struct ext_sched *s, const struct core_alloc *v, int n)
{
    double g = 0;
    for (int k = 0; k < n; k++) {
        const struct pod *q = sched_smap_get(&s->pods, v[k].pod_uid);
        const json_t *t = q ? json_object_get(json_object_get(q->obj, "spec"),
                                              "terminationGracePeriodSeconds")
                            : NULL;
        double gk = json_is_integer(t) ? (double)json_integer_value(t) : 30.0;
        if (gk > g)
            g = gk;
    }
    return g;
}

/* Whether the pod a /filter names is one the watch brought, at the
 * priority the watch says (spec.priority cannot change): /filter's body is
 * whatever its caller sent, and a preemption deletes other pods. A pod not
 * seen yet is preempted for at a later /filter, to which it is nudged
 * when the watch brings it (observe_locked). */
static int watched_as_sent(struct pod *p, const struct core_pod *pod)
{
    if (!p->watched) {
        p->preempt_unseen = 1; /* nudged when the watch brings it */
        return 0;
    }
    const json_t *pr = json_object_get(json_object_get(p->obj, "spec"), "priority");
    if ((json_is_integer(pr) ? json_integer_value(pr) : 0) == pod->priority)
        return 1;
    log_warn("extender", "/filter of pod %s/%s says priority %d, its object %lld: no "
             "preemption for it", p->ns, p->name, (int)pod->priority,
             (long long)json_integer_value(pr));
    return 0;
}

int sched_filter_preempt(struct ext_sched *s, struct pod *p, const struct core_pod *pod,
                         const json_t *obj, const int *pos, const unsigned char *fit, int n,
                         struct ext_preemption *pr)
{
    if (!s->opts.filter_preemption || !s->commit.preempt || !p ||
        pod->req.kind == CORE_REQ_NONE || placed(s, p) || !watched_as_sent(p, pod) ||
        (s->commit.may_bind && !s->commit.may_bind(s->commit.ud)) || s->pdbs_pending ||
        still_preempting(s, p, pos, fit, n) || !may_preempt(s, p, pod, obj, pos, fit, n))
        return 0;
    /* the nodes that hold a pod of lower priority, in one pass: the search
     * below moves the stamps of the nodes it visits (the kept answers of
     * every pod there are decided again), so it visits only those */
    int nn = core_cluster_node_count(s->c), any = 0;
    unsigned char *low = calloc((size_t)nn + 1, 1);
    for (int k = 0; low && k < core_cluster_alloc_count(s->c); k++) {
        const struct core_alloc *a = core_cluster_alloc(s->c, k);
        const struct core_node *an = a->priority < pod->priority ? core_cluster_find(s->c, a->node)
                                                                 : NULL;
        if (an && core_node_pos(an) >= 0 && core_node_pos(an) < nn)
            any = low[core_node_pos(an)] = 1;
    }
    if (!any) {
        free(low);
        return 0;
    }
    struct core_alloc *v = calloc(EXT_MAX_VICTIMS, sizeof *v);
    struct core_alloc *best = calloc(EXT_MAX_VICTIMS, sizeof *best);
    struct sched_preempting *rec = calloc(1, sizeof *rec);
    struct core_node *at = NULL;
    struct victims_key bk = {0};
    int nbest = 0;
    if (!v || !best || !rec)
        goto out;
    double now = sched_wall_now(); /* the start of victims not started yet */
    int held = sched_nominated_prepare(s, pod);
    int quota = sched_quota_prepare(s, pod);
    for (int i = 0; i < n; i++) {
        /* the nodes kube-scheduler's own filters passed, which the pod
         * does not fit now (or a nomination or its quota refused), and
         * where a pod of lower priority runs */
        if (pos[i] < 0 || pos[i] >= nn || !low[pos[i]] ||
            (fit[i] != EXT_FIT_NOW && fit[i] != EXT_FIT_YES))
            continue;
        struct core_node *node = core_cluster_node(s->c, pos[i]);
        int nviol = 0;
        int nv = node_victims(s, node, pod, held, quota, NULL, 0, v, EXT_MAX_VICTIMS, &nviol);
        if (nv <= 0)
            continue;
        struct victims_key k = key_of(s, v, nv, nviol, now);
        if (!at || key_less(k, bk)) {
            at = node;
            bk = k;
            nbest = nv;
            memcpy(best, v, (size_t)nv * sizeof *v);
        }
    }
    if (!at || sched_smap_put(&s->preempting, p->uid, p) < 0) {
        nbest = 0;
        goto out;
    }
    memset(pr, 0, sizeof *pr);
    snprintf(pr->pod, sizeof pr->pod, "%s/%s", p->ns, p->name);
    snprintf(pr->uid, sizeof pr->uid, "%s", p->uid);
    snprintf(pr->node, sizeof pr->node, "%s", at->name);
    snprintf(rec->node, sizeof rec->node, "%s", at->name);
    pr->priority = pod->priority;
    pr->n = rec->n = nbest;
    for (int k = 0; k < nbest; k++) {
        snprintf(pr->v[k].pod, sizeof pr->v[k].pod, "%s", best[k].pod_name);
        snprintf(pr->v[k].uid, sizeof pr->v[k].uid, "%s", best[k].pod_uid);
        snprintf(rec->uid[k], sizeof rec->uid[k], "%s", best[k].pod_uid);
        pr->v[k].priority = best[k].priority;
    }
    rec->deadline = sched_wall_now() + grace_of(s, best, nbest) + 2 * EXT_PREEMPT_KEEP_S;
    rec->gen = pr->gen = ++s->n_preempts;
    p->pre = rec;
    rec = NULL;
    sched_track_nomination(s, p); /* the node is the pod's from now on */
out:
    free(low);
    free(v);
    free(best);
    free(rec);
    return nbest > 0;
}

int ext_sched_expire_preemptions(struct ext_sched *s, double now)
{
    int ended = 0;
    pthread_mutex_lock(&s->mu);
    SMAP_FOREACH(&s->preempting, it)
    {
        struct pod *p = it->val;
        struct sched_preempting *rec = p->pre;
        int holding = 0;
        for (int k = 0; k < rec->n && !holding; k++)
            holding = core_alloc_find(s->c, rec->uid[k]) != NULL;
        if (holding)
            rec->gone_at = 0;
        else if (!rec->gone_at)
            rec->gone_at = now;
        if (now > rec->deadline || (rec->gone_at && now - rec->gone_at > EXT_PREEMPT_KEEP_S)) {
            sched_preempt_drop(s, p); /* deletes this entry: SMAP_FOREACH allows it */
            sched_track_nomination(s, p);
            ended++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return ended;
}

struct sched_preempting *sched_preempt_take(struct ext_sched *s, struct pod *p)
{
    struct sched_preempting *rec = p->pre;
    if (rec) {
        sched_smap_del(&s->preempting, p->uid);
        p->pre = NULL;
    }
    return rec;
}

void sched_preempt_give(struct ext_sched *s, struct pod *p, struct sched_preempting *rec)
{
    if (!p || p->pre || sched_smap_put(&s->preempting, p->uid, p) < 0) {
        free(rec);
        return;
    }
    p->pre = rec;
    sched_track_nomination(s, p); /* a bound pod drops it here */
}
