/*
 * ext/sched.c - see sched.h. The extender's state and its lifecycle, which
 * every verb shares: the object (new/free, options, metrics), the pods it
 * has seen (the table, eviction, observe, restore, release), the nodes and
 * their kubelet inventory, and the per-node verdict the verbs build on
 * (sched_node_fits). The verbs are in sched_<verb>.c, what they share in
 * sched_verb.c, the structures in sched_int.h.
 */
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/core.h"
#include "core/policy.h"
#include "core/quota.h"
#include "ext/annot.h"
#include "ext/devices.h"
#include "ext/memo.h"
#include "ext/nodelock.h"
#include "ext/nodes.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "ext/sched_int.h"
#include "kube/client.h"
#include "util/buf.h"
#include "util/clock.h"
#include "util/log.h"

/* ---- a small string-keyed hash map ---------------------------------------- */

/* Sizes the table for n entries at once (up to 2^20), so that it does
 * not rehash while it fills. -1 out of memory. */
static int smap_reserve(struct smap *m, size_t n)
{
    size_t nb = 1024;
    while (nb < n && nb < (1u << 20))
        nb *= 2;
    if (!(m->b = calloc(nb, sizeof *m->b)))
        return -1;
    m->nb = nb;
    return 0;
}

static size_t hash(const char *s)
{
    size_t h = 1469598103934665603ull;
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

void *sched_smap_get(const struct smap *m, const char *k)
{
    if (!m->nb)
        return NULL;
    for (struct entry *e = m->b[hash(k) & (m->nb - 1)]; e; e = e->next)
        if (strcmp(e->key, k) == 0)
            return e->val;
    return NULL;
}

int sched_smap_put(struct smap *m, const char *k, void *v)
{
    struct entry *e;
    if (m->n + 1 > m->nb) {
        size_t nb = m->nb ? m->nb * 2 : 1024;
        struct entry **b = calloc(nb, sizeof *b);
        if (!b)
            return -1;
        for (size_t i = 0; i < m->nb; i++)
            while ((e = m->b[i])) {
                m->b[i] = e->next;
                e->next = b[hash(e->key) & (nb - 1)];
                b[hash(e->key) & (nb - 1)] = e;
            }
        free(m->b);
        m->b = b;
        m->nb = nb;
    }
    if (!(e = malloc(sizeof *e)) || !(e->key = strdup(k))) {
        free(e);
        return -1;
    }
    e->val = v;
    e->next = m->b[hash(k) & (m->nb - 1)];
    m->b[hash(k) & (m->nb - 1)] = e;
    m->n++;
    return 0;
}

void *sched_smap_del(struct smap *m, const char *k)
{
    if (!m->nb)
        return NULL;
    for (struct entry **p = &m->b[hash(k) & (m->nb - 1)]; *p; p = &(*p)->next)
        if (strcmp((*p)->key, k) == 0) {
            struct entry *e = *p;
            void *v = e->val;
            *p = e->next;
            free(e->key);
            free(e);
            m->n--;
            return v;
        }
    return NULL;
}

/* ---- state ---------------------------------------------------------------- */

/* NodeNames arrays remembered: /filter's candidates and /prioritize's
 * (/filter's answer, one per pod shape): enough for the pods of seven or
 * more shapes in turn (bench/extender-loop.sh), each ~0.3 MB at 5,000 nodes. */
#define EXT_NAMELISTS 16
/* Answers kept (ext/memo.h): a /filter and a /prioritize entry per list
 * and pod shape, for 16 shapes at once (test_ext_memo's test_shapes). */
#define EXT_MEMO_SLOTS 32

void sched_decision(struct ext_sched *s, const char *verb, const char *result)
{
    if (s->m_decisions)
        metric_inc(s->m_decisions, (const char *[]){verb, result});
}

int ext_sched_new(const struct ext_sched_opts *opts, struct ext_sched **out, struct gs_err *e)
{
    struct ext_sched *s = calloc(1, sizeof *s);
    const char *pname = opts->policy ? opts->policy : EXT_DEFAULT_POLICY;
    if (!s)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    s->opts = *opts;
    if (!s->opts.names)
        s->opts.names = core_names_default();
    if (!s->opts.max_pods)
        s->opts.max_pods = 100000;
    if (s->opts.hard_pod_affinity_weight == 0)
        s->opts.hard_pod_affinity_weight = CORE_HARD_POD_AFFINITY_WEIGHT;
    else if (s->opts.hard_pod_affinity_weight == EXT_HARD_AFFINITY_NONE)
        s->opts.hard_pod_affinity_weight = 0;
    if (s->opts.hard_pod_affinity_weight < 0 ||
        s->opts.hard_pod_affinity_weight > CORE_HARD_POD_AFFINITY_WEIGHT_MAX) {
        int w = s->opts.hard_pod_affinity_weight;
        free(s);
        return gs_errf(e, GS_EINVAL, "hard_pod_affinity_weight: %d is not 0..%d", w,
                       CORE_HARD_POD_AFFINITY_WEIGHT_MAX);
    }
    if (!(s->policy = core_policy_need(pname, "policy", e))) {
        free(s);
        return -GS_EINVAL;
    }
    if (smap_reserve(&s->pods, s->opts.max_pods) < 0 || !(s->c = core_cluster_new()) ||
        !(s->quotas = core_quotas_new()) || !(s->pdbs = ext_pdbs_new()) ||
        !(s->lists = ext_namecache_new(EXT_NAMELISTS)) || !(s->memo = ext_memo_new(EXT_MEMO_SLOTS))) {
        ext_pdbs_free(s->pdbs);
        ext_namecache_free(s->lists);
        core_cluster_free(s->c);
        core_quotas_free(s->quotas);
        free(s->pods.b);
        free(s);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    gs_cond_init_mono(&s->bind_came);
    s->node_gen = 1;
    if (opts->metrics) {
        struct metrics *m = opts->metrics;
        s->m_decisions = metrics_add(m, METRIC_COUNTER, "gpusched_extender_decisions_total",
                                     "Extender decisions by verb and result.", "verb,result",
                                     NULL, 0, e);
        double wb[10];
        metrics_exp_buckets(0.0001, 2.5, 10, wb); /* 100 us .. 0.38 s */
        s->m_filter_waits = metrics_add(
            m, METRIC_HISTOGRAM, "gpusched_extender_filter_wait_seconds",
            "How long GPU pod /filters waited for the /bind of the pod filtered before them "
            "(only those that waited), by outcome (bound: it came; timeout: filter_wait "
            "passed).", "outcome", wb, 10, e);
        s->m_kept = metrics_add(m, METRIC_COUNTER, "gpusched_extender_kept_answers_total",
                                "Replies to /filter and /prioritize sent from a kept answer "
                                "(nothing they say had changed), by verb.", "verb", NULL, 0, e);
        s->m_redecided = metrics_add(m, METRIC_COUNTER, "gpusched_extender_redecided_nodes_total",
                                     "Nodes /filter decided for its kept answers: every node "
                                     "of a new question, then only those whose state changed.",
                                     NULL, NULL, 0, e);
        s->m_gpus = metrics_add(m, METRIC_GAUGE, "gpusched_gpus", "GPUs per node and model.",
                                "node,model", NULL, 0, e);
        s->m_gpus_alloc = metrics_add(m, METRIC_GAUGE, "gpusched_gpus_allocated",
                                      "GPUs holding at least one pod, per node and model.",
                                      "node,model", NULL, 0, e);
        s->m_gpus_free = metrics_add(m, METRIC_GAUGE, "gpusched_gpus_free",
                                     "Healthy GPUs holding no pod, per node and model.",
                                     "node,model", NULL, 0, e);
        s->m_mem_alloc = metrics_add(m, METRIC_GAUGE, "gpusched_gpu_memory_allocated_mib",
                                     "GPU memory allocated to pods (MiB), per node and model.",
                                     "node,model", NULL, 0, e);
        s->m_milli_alloc = metrics_add(m, METRIC_GAUGE, "gpusched_gpu_compute_allocated_milli",
                                       "GPU compute allocated to pods (thousandths of a GPU), per "
                                       "node and model.", "node,model", NULL, 0, e);
        s->m_frag = metrics_add(m, METRIC_GAUGE, "gpusched_fragmentation_milli",
                                "Cluster GPU fragmentation (FGD measure, thousandths of a GPU).",
                                NULL, NULL, 0, e);
        s->m_allocs = metrics_add(m, METRIC_GAUGE, "gpusched_allocations",
                                  "Pods holding GPUs.", NULL, NULL, 0, e);
        s->m_others = metrics_add(m, METRIC_GAUGE, "gpusched_extender_other_pods",
                                  "Pods bound without GPUs of ours, counted on their nodes.",
                                  NULL, NULL, 0, e);
        s->m_owners = metrics_add(m, METRIC_GAUGE, "gpusched_extender_pod_term_owners",
                                  "Pods remembered or counted whose pod (anti-)affinity terms "
                                  "may pick the pods to come (each decision walks them).",
                                  NULL, NULL, 0, e);
        s->m_nominated = metrics_add(m, METRIC_GAUGE, "gpusched_extender_nominated_pods",
                                     "Pending GPU pods nominated to a node by a preemption, "
                                     "whose GPUs there are kept for them.",
                                     NULL, NULL, 0, e);
        s->m_stale = metrics_add(m, METRIC_GAUGE, "gpusched_nodes_stale",
                                 "Nodes whose GPU inventory is older than inventory_ttl.", NULL,
                                 NULL, 0, e);
        s->m_ns_usage = metrics_add(m, METRIC_GAUGE, "gpusched_namespace_gpu_usage",
                                    "GPU resources held per namespace and model (resource: "
                                    "gpus, memory_mib, milli).", "namespace,model,resource",
                                    NULL, 0, e);
        s->m_quota_limit = metrics_add(m, METRIC_GAUGE, "gpusched_quota_limit",
                                       "GPUQuota limits (model \"\" = the total).",
                                       "namespace,quota,model,resource", NULL, 0, e);
        s->m_quota_used = metrics_add(m, METRIC_GAUGE, "gpusched_quota_used",
                                      "Use counted against each GPUQuota limit.",
                                      "namespace,quota,model,resource", NULL, 0, e);
    }
    *out = s;
    return 0;
}

static void pod_free(struct pod *p)
{
    if (p) {
        json_decref(p->obj);
        free(p->pre);
        free(p);
    }
}

void ext_sched_free(struct ext_sched *s)
{
    if (!s)
        return;
    SMAP_FOREACH(&s->pods, it) pod_free(sched_smap_del(&s->pods, it->key));
    SMAP_FOREACH(&s->inv, it) free(sched_smap_del(&s->inv, it->key));
    SMAP_FOREACH(&s->unkept, it) free(sched_smap_del(&s->unkept, it->key));
    SMAP_FOREACH(&s->nominated, it) sched_smap_del(&s->nominated, it->key); /* pods' */
    SMAP_FOREACH(&s->preempting, it) sched_smap_del(&s->preempting, it->key); /* pods' */
    sched_usage_clear(s);
    free(s->usage_pods.b);
    free(s->usage_nodes.b);
    free(s->pods.b);
    free(s->inv.b);
    free(s->unkept.b);
    free(s->nominated.b);
    free(s->preempting.b);
    core_cluster_free(s->c);
    core_quotas_free(s->quotas);
    ext_pdbs_free(s->pdbs);
    ext_memo_free(s->memo);
    ext_namelist_put(s->base);
    ext_namecache_free(s->lists);
    sched_podaff_free(s);
    sched_held_free(s->held);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->bind_came);
    free(s);
}

void ext_sched_set_quotas(struct ext_sched *s, struct core_quotas *q)
{
    pthread_mutex_lock(&s->mu);
    core_quotas_free(s->quotas);
    s->quotas = q;
    atomic_store(&s->quotas_known, 1);
    pthread_mutex_unlock(&s->mu);
}

int ext_sched_quotas_known(struct ext_sched *s) { return atomic_load(&s->quotas_known); }

/* Brings quota usage up to date for a pod of `ns`; 1 when ns has a quota.
 * Called with the lock held. */
int sched_quota_prepare(struct ext_sched *s, const struct core_pod *pod)
{
    if (pod->req.kind == CORE_REQ_NONE || !s->quotas || !core_quotas_has(s->quotas, pod->ns))
        return 0;
    core_quotas_recount(s->quotas, s->c, pod->ns, NULL);
    return 1;
}

/* Would the pod on node n exceed its namespace's quota? Lock held. */
int sched_quota_blocks(struct ext_sched *s, const struct core_pod *pod, const struct core_node *n,
                       struct gs_err *e)
{
    struct core_quota_use u;
    core_quota_use_on_node(&pod->req, n, &u);
    return core_quotas_check(s->quotas, pod->ns, &u, 1, e) < 0;
}

void ext_sched_set_commit(struct ext_sched *s, const struct ext_commit *c) { s->commit = *c; }
void ext_sched_set_nodelock(struct ext_sched *s, struct ext_nodelock *l) { s->lock = l; }

double sched_wall_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void ext_sched_counts(struct ext_sched *s, int *nodes, int *allocs)
{
    pthread_mutex_lock(&s->mu);
    *nodes = core_cluster_node_count(s->c);
    *allocs = core_cluster_alloc_count(s->c);
    pthread_mutex_unlock(&s->mu);
}

/* ---- pods ------------------------------------------------------------------ */

static void pod_identity(const json_t *pod, const char **uid, const char **ns, const char **name)
{
    *name = kube_meta_str(pod, "name");
    *ns = kube_meta_str(pod, "namespace");
    *uid = kube_meta_str(pod, "uid");
    if (!*ns || !**ns)
        *ns = "default";
}

struct pod *sched_find_by_name(struct ext_sched *s, const char *ns, const char *name)
{
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        if (strcmp(p->ns, ns) == 0 && strcmp(p->name, name) == 0)
            return p;
    }
    return NULL;
}

static void forget(struct ext_sched *s, struct pod *p);

static void unlink_pod(struct ext_sched *s, struct pod *p)
{
    if (p->older)
        p->older->newer = p->newer;
    else if (s->oldest == p)
        s->oldest = p->newer;
    if (p->newer)
        p->newer->older = p->older;
    else if (s->newest == p)
        s->newest = p->older;
    p->older = p->newer = NULL;
}

/* Moves p to the newest end of the eviction order. */
static void to_newest(struct ext_sched *s, struct pod *p)
{
    unlink_pod(s, p);
    p->older = s->newest;
    if (s->newest)
        s->newest->newer = p;
    else
        s->oldest = p;
    s->newest = p;
}

/* Makes room for one more pod in a full table: drops the least recently
 * remembered pod that holds nothing. A few pods at a time, so no request
 * waits for a sweep of the whole table: pods that hold GPUs (or wait for
 * their node) are moved to the newest end on the way, and after
 * EVICT_LOOK of them the table grows by one instead (they are bounded by
 * the GPUs there are). */
#define EVICT_LOOK 16
static void evict(struct ext_sched *s)
{
    for (int k = 0; k < EVICT_LOOK && s->oldest; k++) {
        struct pod *p = s->oldest;
        if (!core_alloc_find(s->c, p->uid) && !p->need_restore && !p->nominated[0]) {
            forget(s, p);
            return;
        }
        to_newest(s, p);
    }
}

/* Keeps p's nomination (sched_nominated.c): status.nominatedNodeName while
 * the pod has no node. A nomination withdrawn or moved may let the pods it
 * held off fit: worth a nudge. */
static void set_nominated(struct ext_sched *s, struct pod *p, const char *node)
{
    if (strcmp(p->nominated, node) == 0)
        return;
    if (p->nominated[0]) {
        s->nomination_gone = 1;
        sched_smap_del(&s->nominated, p->uid);
    }
    /* out of memory: not kept, as before nominations were */
    if (*node && sched_smap_put(&s->nominated, p->uid, p) < 0)
        node = "";
    snprintf(p->nominated, sizeof p->nominated, "%s", node);
}

void sched_track_nomination(struct ext_sched *s, struct pod *p)
{
    const char *node =
        json_string_value(json_object_get(json_object_get(p->obj, "spec"), "nodeName"));
    const char *nom = json_string_value(
        json_object_get(json_object_get(p->obj, "status"), "nominatedNodeName"));
    if (node && *node)
        sched_preempt_drop(s, p); /* bound: its preemption is over */
    else if (sched_preempting(p))
        nom = sched_preempting(p); /* kube-scheduler 1.22+ may clear the one written for it */
    /* in cluster mode only: the watch tells when the pod goes (standalone,
     * a pod that /filter once saw nominated would hold its node forever) */
    if (!s->commit.bind || (node && *node) || !nom || strlen(nom) >= sizeof p->nominated)
        nom = "";
    set_nominated(s, p, nom);
}

/* Remembers (or refreshes) a pod; the key is its UID, or NS/NAME without one. */
struct pod *sched_remember(struct ext_sched *s, const json_t *obj, int watched)
{
    const char *uid, *ns, *name;
    char key[64 + 2 * CORE_NAME_MAX];
    struct pod *p;

    pod_identity(obj, &uid, &ns, &name);
    if (!name || strlen(name) >= CORE_NAME_MAX || strlen(ns) >= CORE_NAME_MAX ||
        (uid && strlen(uid) >= sizeof p->uid))
        return NULL;
    snprintf(key, sizeof key, "%s", uid && *uid ? uid : "");
    if (!*key)
        snprintf(key, sizeof key, "%s/%s", ns, name);
    if (strlen(key) >= sizeof p->uid)
        return NULL;
    if (!(p = sched_smap_get(&s->pods, key))) {
        if (s->pods.n >= s->opts.max_pods)
            evict(s);
        if (!(p = calloc(1, sizeof *p)))
            return NULL;
        snprintf(p->uid, sizeof p->uid, "%s", key);
        snprintf(p->ns, sizeof p->ns, "%s", ns);
        snprintf(p->name, sizeof p->name, "%s", name);
        if (sched_smap_put(&s->pods, key, p) < 0) {
            free(p);
            return NULL;
        }
    }
    /* a verb's body never replaces what the watch brought: kube-scheduler
     * may send a copy from before the pod was bound (its queue's, after a
     * failed bind), and that copy, without nodeName, would make a bound
     * pod's GPUs look orphaned (sched_drop_orphan) */
    if (p->obj != obj && (watched || !p->watched)) {
        p->watched |= watched;
        /* pod terms pick placed pods by their labels (sched_podaff.c) */
        s->labels_gen += p->obj && !sched_labels_same(p->obj, obj);
        json_decref(p->obj);
        p->obj = json_incref((json_t *)obj);
        const char *st = json_string_value(json_object_get(json_object_get(obj, "status"),
                                                           "startTime"));
        if (!st || kube_parse_time(st, &p->start) < 0)
            p->start = 0;
        if (watched)
            sched_track_nomination(s, p);
        sched_podaff_owner_put(s, p->uid, obj);
    }
    p->seq = ++s->seq;
    to_newest(s, p);
    return p;
}

void sched_set_bind_busy(struct ext_sched *s, struct pod *p, int v)
{
    if (p->bind_busy != v)
        s->n_bind_busy += v ? 1 : -1;
    p->bind_busy = v;
}

static void forget(struct ext_sched *s, struct pod *p)
{
    if (s->lock)
        s->released |= ext_nodelock_clear(s->lock, p->uid);
    sched_set_bind_busy(s, p, 0);
    sched_preempt_drop(s, p);
    set_nominated(s, p, "");
    if (p->need_restore)
        s->n_need_restore--;
    unlink_pod(s, p);
    char uid[sizeof p->uid];
    snprintf(uid, sizeof uid, "%s", p->uid);
    pod_free(sched_smap_del(&s->pods, uid));
    sched_podaff_owner_drop(s, uid);
}

static int32_t pod_priority(const json_t *pod)
{
    const json_t *v = json_object_get(json_object_get(pod, "spec"), "priority");
    return json_is_integer(v) ? (int32_t)json_integer_value(v) : 0;
}

/* Reserves an allocation from annotations; called with the lock held. req:
 * the pod's request, checked against them (NULL: a journal record, which
 * only binds write). admitted: kubelet runs the pod (core_reserve_admitted). */
static int restore_locked(struct ext_sched *s, const char *uid, const char *ns, const char *name,
                          int32_t priority, int64_t cpu, int64_t mem,
                          const struct core_request *req, const json_t *annotations,
                          int admitted, struct gs_err *e)
{
    struct core_alloc a;
    int rc;
    memset(&a, 0, sizeof a);
    if (strlen(uid) >= sizeof a.pod_uid)
        return gs_errf(e, GS_EINVAL, "pod uid '%.80s' is too long", uid);
    snprintf(a.pod_uid, sizeof a.pod_uid, "%s", uid);
    snprintf(a.pod_name, sizeof a.pod_name, "%s/%s", ns, name);
    a.priority = priority;
    a.cpu_milli = cpu;
    a.mem_bytes = mem;
    if ((rc = ext_annot_parse(s->c, annotations, s->opts.names->annot_prefix, &a, e)) < 0 ||
        (req && (rc = ext_annot_fits(req, &a, e)) < 0))
        return rc;
    return admitted ? core_reserve_admitted(s->c, &a, e) : core_reserve(s->c, &a, e);
}

int ext_sched_restore(struct ext_sched *s, const json_t *rec, struct gs_err *e)
{
    const char *uid, *ns, *name;
    json_int_t prio, cpu, mem;
    const json_t *ann;
    json_error_t je;
    if (json_unpack_ex((json_t *)rec, &je, 0, "{s:s, s:s, s:s, s:I, s:I, s:I, s:o}", "uid", &uid,
                       "ns", &ns, "name", &name, "priority", &prio, "cpu_milli", &cpu,
                       "mem_bytes", &mem, "annotations", &ann) < 0)
        return gs_errf(e, GS_EINVAL, "allocation record: %s", je.text);
    if (strlen(ns) >= CORE_NAME_MAX || strlen(name) >= CORE_NAME_MAX || prio < INT32_MIN ||
        prio > INT32_MAX || !json_is_object(ann))
        return gs_errf(e, GS_EINVAL, "allocation record: bad ns, name, priority or annotations");
    pthread_mutex_lock(&s->mu);
    int rc = restore_locked(s, uid, ns, name, (int32_t)prio, cpu, mem, NULL, ann, 0, e);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Has kubelet admitted the pod: the device plugin marked it allocated, or
 * kubelet reported it (status.startTime)? ann: its annotations. */
static int kubelet_took(const struct ext_sched *s, const json_t *pod, const json_t *ann)
{
    char key[300];
    snprintf(key, sizeof key, "%sallocated-at", s->opts.names->annot_prefix);
    return json_object_get(ann, key) ||
           json_is_string(json_object_get(json_object_get(pod, "status"), "startTime"));
}

static int has_node_name(const struct pod *p);

/* Restores the allocation a pod object's annotations record, if any. */
static void restore_pod(struct ext_sched *s, struct pod *p)
{
    struct gs_err e = GS_ERR_INIT;
    const json_t *ann = json_object_get(json_object_get(p->obj, "metadata"), "annotations");
    struct core_pod cp;
    int rc;

    if (p->need_restore) {
        p->need_restore = 0;
        s->n_need_restore--;
    }
    if (!ext_annot_node(ann, s->opts.names->annot_prefix) || core_alloc_find(s->c, p->uid))
        return;
    /* one kubelet admitted is taken as it runs: a stale assignment of a pod
     * that never ran, listed first, or a node whose allocatable shrank
     * since, left it uncounted (its GPUs offered to the next pod) */
    if ((rc = core_pod_parse(p->obj, s->opts.names, &cp, &e)) == 0) {
        rc = restore_locked(s, p->uid, p->ns, p->name, pod_priority(p->obj), cp.req.cpu_milli,
                            cp.req.mem_bytes, &cp.req, ann,
                            has_node_name(p) && kubelet_took(s, p->obj, ann), &e);
        core_pod_clear(&cp);
    }
    if (rc == -GS_ENOENT) {
        p->need_restore = 1; /* its node is not known yet */
        s->n_need_restore++;
    } else if (rc < 0) {
        log_warn("extender", "pod %s/%s: cannot restore its GPUs: %s", p->ns, p->name, e.msg);
    }
}

static void retry_restores(struct ext_sched *s)
{
    if (!s->n_need_restore)
        return;
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        if (p->need_restore)
            restore_pod(s, p);
    }
}

int ext_sched_release_one(struct ext_sched *s, const char *who, const char *uid,
                          struct gs_err *e)
{
    if (!uid)
        return ext_sched_release(s, who, e);
    pthread_mutex_lock(&s->mu);
    const struct core_alloc *a = core_alloc_find(s->c, uid);
    int ok = a && strcmp(a->pod_name, who) == 0;
    pthread_mutex_unlock(&s->mu);
    if (!ok)
        return gs_errf(e, GS_ENOENT, "pod %s of uid %.64s holds no GPUs", who, uid);
    return ext_sched_release(s, uid, e);
}

int ext_sched_release(struct ext_sched *s, const char *who, struct gs_err *e)
{
    struct pod *p;
    char uid[64];
    int rc;

    pthread_mutex_lock(&s->mu);
    snprintf(uid, sizeof uid, "%s", who);
    if (!core_alloc_find(s->c, who) && strchr(who, '/')) {
        /* by name: the allocation of that name (a pod object may be a newer
         * pod of the name, still pending; allocations restored from a
         * journal have none); two pods of one name hold GPUs when the name
         * was reused before the older one was released: say so */
        int n = 0;
        char other[64] = "";
        for (int i = 0; i < core_cluster_alloc_count(s->c); i++) {
            const struct core_alloc *a = core_cluster_alloc(s->c, i);
            if (strcmp(a->pod_name, who) != 0)
                continue;
            if (n++)
                snprintf(other, sizeof other, "%s", uid);
            snprintf(uid, sizeof uid, "%s", a->pod_uid);
        }
        if (n > 1) {
            pthread_mutex_unlock(&s->mu);
            return gs_errf(e, GS_ECONFLICT, "%d pods named %s hold GPUs (uids %s, %s%s): "
                           "release one by its uid (gpusched extender release %s UID)", n, who,
                           other, uid, n > 2 ? ", ..." : "", who);
        }
    }
    void *ticket = NULL;
    int lrc = 0;
    char name[2 * CORE_NAME_MAX] = "";
    const struct core_alloc *a = core_alloc_find(s->c, uid);
    if (a)
        snprintf(name, sizeof name, "%s", a->pod_name);
    rc = core_unreserve(s->c, uid, e);
    char *again = rc < 0 && s->commit.log_release ? sched_smap_del(&s->unkept, who) : NULL;
    if (again) { /* released before, but its record was not kept: write it now */
        snprintf(uid, sizeof uid, "%s", again);
        snprintf(name, sizeof name, "%s", who);
        free(again);
        rc = 0;
    } else if (rc == 0 && (p = sched_smap_get(&s->pods, uid))) {
        forget(s, p);
    }
    /* logged under the lock: after the record of the bind it undoes */
    if (rc == 0 && s->commit.log_release)
        lrc = s->commit.log_release(s->commit.ud, uid, &ticket, e);
    pthread_mutex_unlock(&s->mu);
    if (rc < 0)
        return gs_errf(e, GS_ENOENT, "pod %s holds no GPUs", who);
    sched_decision(s, "release", "released");
    if (lrc == 0 && ticket)
        lrc = s->commit.durable(s->commit.ud, ticket, e);
    if (lrc < 0 && name[0]) { /* a release asked again writes the record then */
        char *u = strdup(uid);
        pthread_mutex_lock(&s->mu);
        free(sched_smap_del(&s->unkept, name));
        if (u && sched_smap_put(&s->unkept, name, u) < 0)
            free(u);
        pthread_mutex_unlock(&s->mu);
    }
    return lrc < 0 ? lrc : 0;
}

/* Does a pod with an assignment still wait for kubelet (nodelock.h)? Not
 * once the device plugin marked it allocated, nor once kubelet reported it
 * (status.startTime: admitted). *since: its assigned-at. */
static int waits_for_kubelet(struct ext_sched *s, const json_t *pod, const json_t *ann,
                             double *since)
{
    char key[300];
    if (kubelet_took(s, pod, ann))
        return 0;
    snprintf(key, sizeof key, "%sassigned-at", s->opts.names->annot_prefix);
    const json_t *at = json_object_get(ann, key);
    if (!json_is_string(at) || kube_parse_time(json_string_value(at), since) < 0)
        *since = sched_wall_now();
    return 1;
}

static int has_node_name(const struct pod *p)
{
    const char *node =
        json_string_value(json_object_get(json_object_get(p->obj, "spec"), "nodeName"));
    return node && *node;
}

/* Records in the node lock whether an assigned pod still holds its node. */
static void lock_observe(struct ext_sched *s, struct pod *p, const json_t *ann)
{
    const char *node = ext_annot_node(ann, s->opts.names->annot_prefix);
    double since;
    char name[2 * CORE_NAME_MAX];
    if (!s->lock)
        return;
    /* an assignment without a Binding holds the node only while a bind of
     * this replica is making or has made it: one left behind by a replica
     * that died has no kubelet to wait for */
    if (node && (has_node_name(p) || p->binding || p->bound) &&
        waits_for_kubelet(s, p->obj, ann, &since)) {
        snprintf(name, sizeof name, "%s/%s", p->ns, p->name);
        ext_nodelock_set(s->lock, p->uid, name, node, since);
    } else {
        s->released |= ext_nodelock_clear(s->lock, p->uid);
    }
}

/* A pod bound to node without an assignment: its CPU, memory and pod slot
 * count there (ext/sched_usage.c), as kube-scheduler counts them. One the
 * pod parser refuses counts nothing. */
static void count_other(struct ext_sched *s, const json_t *pod, const char *uid,
                        const char *node)
{
    struct core_pod cp;
    if (core_alloc_find(s->c, uid) || core_pod_parse(pod, s->opts.names, &cp, NULL) < 0) {
        sched_usage_drop(s, uid);
        return;
    }
    sched_usage_put(s, pod, uid, node, cp.req.cpu_milli, cp.req.mem_bytes);
    core_pod_clear(&cp);
}

/* Does allocation a hold what the assignment annotations say: their node
 * and GPUs (or MIG instances)? Annotations that do not parse (a broken
 * edit) leave a as it is. */
static int alloc_is_annotated(struct ext_sched *s, const struct core_alloc *a, const json_t *ann)
{
    struct core_alloc b;
    memset(&b, 0, sizeof b);
    int rc = ext_annot_parse(s->c, ann, s->opts.names->annot_prefix, &b, NULL);
    if (rc < 0)
        return rc != -GS_ENOENT; /* ENOENT: on a node not known (yet) */
    if (strcmp(a->node, b.node) != 0 || a->n != b.n)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (a->gpu[i] != b.gpu[i] || a->mig[i] != b.mig[i])
            return 0;
    return 1;
}

static int observe_locked(struct ext_sched *s, const json_t *pod, int deleted)
{
    const char *uid, *ns, *name;
    struct pod *p;
    int freed = 0;

    pod_identity(pod, &uid, &ns, &name);
    if (!uid || !*uid || !name)
        return 0;
    if ((p = sched_smap_get(&s->pods, uid))) {
        p->seq = ++s->seq; /* seen (ext_sched_replace_pods counts on it) */
        p->unlisted = 0;
    }
    if (deleted || kube_pod_done(pod)) {
        sched_usage_drop(s, uid);
        freed = core_unreserve(s->c, uid, NULL) == 0;
        if ((p = sched_smap_get(&s->pods, uid)))
            forget(s, p);
        else if (s->lock)
            s->released |= ext_nodelock_clear(s->lock, uid);
        return freed;
    }
    const json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
    const json_t *node = json_object_get(json_object_get(pod, "spec"), "nodeName");
    if (ext_annot_node(ann, s->opts.names->annot_prefix)) {
        sched_usage_drop(s, uid); /* its allocation counts it */
        if ((p = sched_remember(s, pod, 1))) {
            p->unschedulable = 0;
            /* an allocation the annotations no longer name (a follower kept
             * the node an earlier bind chose; the leader bound it again
             * elsewhere) gives way to theirs, unless a bind of this replica
             * is writing them right now or wrote them (this view may then
             * predate them: a list taken before its patch) */
            const struct core_alloc *a = core_alloc_find(s->c, uid);
            if (a && !p->binding && !p->bound && !alloc_is_annotated(s, a, ann))
                freed = core_unreserve_undo(s->c, uid, NULL) == 0;
            restore_pod(s, p);
            lock_observe(s, p, ann);
        }
        return freed;
    }
    if (json_is_string(node) && *json_string_value(node)) {
        /* running without an assignment: not a GPU pod of ours, but what
         * it asks counts on its node */
        if ((p = sched_smap_get(&s->pods, uid)) && !core_alloc_find(s->c, uid))
            forget(s, p);
        count_other(s, pod, uid, json_string_value(node));
        return 0;
    }
    sched_usage_drop(s, uid);
    /* pending without an assignment: an allocation it still holds came from
     * annotations that are gone (a failed bind was undone), unless a bind is
     * committing it right now or committed it (then this view predates the
     * annotations: a list taken before the patch) */
    if ((p = sched_smap_get(&s->pods, uid)) && !p->binding && !p->bound &&
        core_alloc_find(s->c, uid))
        freed = core_unreserve_undo(s->c, uid, NULL) == 0; /* it never ran: not learned */
    /* remember GPU pods for /bind (their request is parsed there) */
    struct core_pod cp;
    if (core_pod_parse(pod, s->opts.names, &cp, NULL) == 0) {
        if (cp.req.kind != CORE_REQ_NONE && (p = sched_remember(s, pod, 1)) &&
            p->preempt_unseen) {
            p->preempt_unseen = 0;
            freed = 1; /* nudged: its next /filter may preempt */
        }
        core_pod_clear(&cp);
    }
    return freed;
}

int ext_sched_observe_pod(struct ext_sched *s, const json_t *pod, int deleted)
{
    pthread_mutex_lock(&s->mu);
    int freed = observe_locked(s, pod, deleted);
    /* a node was released while a pod whose bind found it held may sit
     * in kube-scheduler's unschedulable queue: worth a nudge too */
    freed |= s->released && s->n_bind_busy > 0;
    freed |= s->nomination_gone; /* the pods it kept off may fit now */
    s->released = 0;
    s->nomination_gone = 0;
    if (freed) /* begun here, under the lock: a bind refused after it waits for the next */
        s->nudge_round++;
    pthread_mutex_unlock(&s->mu);
    return freed;
}

void ext_sched_bind_gave_up(struct ext_sched *s, const char *uid)
{
    pthread_mutex_lock(&s->mu);
    struct pod *p = sched_smap_get(&s->pods, uid);
    if (p) {
        sched_set_bind_busy(s, p, 1);
        p->nudge_round = s->nudge_round; /* nudged once the next free (a release) comes */
        p->busy_at = gs_mono_s();
    }
    pthread_mutex_unlock(&s->mu);
}

void ext_sched_bind_refused(struct ext_sched *s, const char *uid)
{
    pthread_mutex_lock(&s->mu);
    struct pod *p = sched_smap_get(&s->pods, uid);
    /* one whose node stays held waits for its release (bind_busy); a
     * second's delay: a nudge while kube-scheduler still assumes the pod
     * is an update it skips */
    if (p && !p->bind_busy && !core_alloc_find(s->c, uid))
        p->retry_at = gs_mono_s() + 1.0;
    pthread_mutex_unlock(&s->mu);
}

void ext_sched_nudge_round(struct ext_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->nudge_round++;
    pthread_mutex_unlock(&s->mu);
}

/* Binds refused for a held node first, then the least recently nudged. */
static int by_nudged_no(const void *a, const void *b)
{
    const struct pod *x = *(struct pod *const *)a, *y = *(struct pod *const *)b;
    if (x->bind_busy != y->bind_busy)
        return y->bind_busy - x->bind_busy;
    return x->nudged_no < y->nudged_no ? -1 : x->nudged_no > y->nudged_no;
}

/* Lists p (lock held); 0 when out of memory. */
static int list_nudge(struct ext_sched *s, struct pod *p, char **out)
{
    if (asprintf(out, "%s/%s", p->ns, p->name) < 0)
        return 0;
    p->nudge_round = s->nudge_round;
    p->nudged_no = ++s->n_nudged;
    return 1;
}

int ext_sched_to_nudge(struct ext_sched *s, char **out, int max, double now, int *more)
{
    int n = 0, n_due = 0;
    *more = 0;
    pthread_mutex_lock(&s->mu);
    struct pod **due = calloc(s->pods.n + 1, sizeof *due);
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        if (p->binding || core_alloc_find(s->c, p->uid))
            continue;
        int retry = p->retry_at > 0 && now >= p->retry_at;
        if (retry && n < max && list_nudge(s, p, &out[n])) {
            n++;
            sched_set_bind_busy(s, p, 0);
            p->retry_at = 0;
        } else if (p->retry_at > 0) { /* not due yet, or no room left */
            *more = 1;
        } else if ((p->unschedulable || p->bind_busy) && p->nudge_round != s->nudge_round) {
            /* a bind refused a moment ago: kube-scheduler may still assume
             * the pod, and skips an update of an assumed pod's annotations */
            if (!p->unschedulable && now < p->busy_at + 1.0)
                *more = 1;
            else if (due)
                due[n_due++] = p;
        }
    }
    /* this round's, the least recently nudged first: a round that cannot
     * list them all goes on with the others, however many rounds begin */
    qsort(due, (size_t)n_due, sizeof *due, by_nudged_no);
    for (int k = 0; k < n_due; k++) {
        if (n >= max || !list_nudge(s, due[k], &out[n])) {
            *more = 1;
        } else {
            n++;
            sched_set_bind_busy(s, due[k], 0);
        }
    }
    free(due);
    pthread_mutex_unlock(&s->mu);
    return n;
}

void ext_sched_nudge_failed(struct ext_sched *s, const char *ns_name)
{
    pthread_mutex_lock(&s->mu);
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        size_t nl = strlen(p->ns);
        if (strncmp(ns_name, p->ns, nl) == 0 && ns_name[nl] == '/' &&
            strcmp(ns_name + nl + 1, p->name) == 0) {
            if (p->unschedulable)
                p->nudge_round = s->nudge_round - 1;
            else
                p->retry_at = gs_mono_s() + 1.0;
        }
    }
    pthread_mutex_unlock(&s->mu);
}

/* A pod whose allocation survives a relist: a bind is committing it, or
 * this replica committed it and the list may have been taken before its
 * annotations were written (the watch delivers them next). */
static int keeps_through_relist(const struct pod *p) { return p && (p->binding || p->bound); }

void ext_sched_list_begin(struct ext_sched *s)
{
    pthread_mutex_lock(&s->mu);
    s->list_from = s->n_binds;
    pthread_mutex_unlock(&s->mu);
}

void ext_sched_replace_pods(struct ext_sched *s, const json_t *items)
{
    size_t i;
    const json_t *pod;
    pthread_mutex_lock(&s->mu);
    /* the allocations the list rebuilds; each stays counted in the learned
     * workload, as an ended pod when the list no longer has it */
    int n_gone = 0, cap = core_cluster_alloc_count(s->c);
    struct core_alloc *gone = malloc(((size_t)cap + 1) * sizeof *gone);
    for (int k = 0; k < core_cluster_alloc_count(s->c);) {
        const struct core_alloc *a = core_cluster_alloc(s->c, k);
        if (keeps_through_relist(sched_smap_get(&s->pods, a->pod_uid))) {
            k++;
        } else if (gone) {
            gone[n_gone++] = *a;
            core_unreserve(s->c, a->pod_uid, NULL);
        } else { /* out of memory: the list counts it again if it still runs */
            core_unreserve_undo(s->c, a->pod_uid, NULL);
        }
    }
    /* the preemptions under way carry over to the pods listed again */
    size_t n_pre = 0;
    struct carried {
        char uid[64];
        struct sched_preempting *rec;
    } *pre = calloc(s->preempting.n + 1, sizeof *pre);
    SMAP_FOREACH(&s->preempting, it)
    {
        if (!pre)
            break; /* out of memory: forgotten with their pods */
        snprintf(pre[n_pre].uid, sizeof pre[n_pre].uid, "%s", it->key);
        pre[n_pre++].rec = sched_preempt_take(s, it->val);
    }
    /* and what kube-scheduler was told of pods that wait (its unschedulable
     * queue, a node held): they are nudged when GPUs or the node free up;
     * forgotten, they waited for its periodic flush (60 s, or 5 min) */
    size_t n_wait = 0;
    struct waiting {
        char uid[64];
        int unschedulable, bind_busy;
        double evented_at, retry_at, busy_at;
        unsigned long nudge_round, nudged_no;
    } *wait = calloc(s->pods.n + 1, sizeof *wait);
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        if (keeps_through_relist(p) && core_alloc_find(s->c, it->key))
            continue;
        if (wait && (p->unschedulable || p->bind_busy || p->retry_at > 0)) {
            snprintf(wait[n_wait].uid, sizeof wait[n_wait].uid, "%s", p->uid);
            wait[n_wait].unschedulable = p->unschedulable;
            wait[n_wait].retry_at = p->retry_at;
            wait[n_wait].busy_at = p->busy_at;
            wait[n_wait].nudge_round = p->nudge_round;
            wait[n_wait].nudged_no = p->nudged_no;
            wait[n_wait].evented_at = p->evented_at; /* its Event's minute goes on */
            wait[n_wait++].bind_busy = p->bind_busy;
        }
        forget(s, p);
    }
    sched_usage_clear(s); /* the list counts them again */
    unsigned long before = s->seq;
    json_array_foreach(items, i, pod) observe_locked(s, pod, 0);
    for (int k = 0; k < n_gone; k++) { /* restored, or to be: counted again */
        const struct pod *p = sched_smap_get(&s->pods, gone[k].pod_uid);
        if (core_alloc_find(s->c, gone[k].pod_uid) || (p && p->need_restore))
            core_workload_forget(s->c, &gone[k]);
    }
    free(gone);
    /* a kept pod the list does not have was deleted while we were away,
     * unless its bind is still committing (that commit then fails and
     * undoes itself) or committed after the list began: made after its
     * snapshot, the pod comes with the watch that follows; deleted before
     * it, it never does (ext_sched_unlisted) */
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        if (p->seq > before || p->binding) {
        } else if (p->bound && p->bound_no > s->list_from) {
            p->unlisted = 1;
        } else {
            core_unreserve(s->c, p->uid, NULL);
            forget(s, p);
        }
    }
    for (size_t k = 0; k < n_pre; k++)
        sched_preempt_give(s, sched_smap_get(&s->pods, pre[k].uid), pre[k].rec);
    free(pre);
    for (size_t k = 0; k < n_wait; k++) {
        struct pod *p = sched_smap_get(&s->pods, wait[k].uid);
        if (p && !core_alloc_find(s->c, p->uid)) { /* still pending */
            p->unschedulable = wait[k].unschedulable;
            p->evented_at = wait[k].evented_at;
            p->retry_at = wait[k].retry_at;
            p->busy_at = wait[k].busy_at;
            p->nudge_round = wait[k].nudge_round;
            p->nudged_no = wait[k].nudged_no;
            sched_set_bind_busy(s, p, wait[k].bind_busy);
        }
    }
    free(wait);
    int n = core_cluster_alloc_count(s->c);
    pthread_mutex_unlock(&s->mu);
    log_info("extender", "rebuilt the allocation state from %zu pods: %d hold GPUs",
             json_array_size(items), n);
}

int ext_sched_unlisted(struct ext_sched *s, char **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    SMAP_FOREACH(&s->pods, it)
    {
        const struct pod *p = it->val;
        if (n < max && p->unlisted && asprintf(&out[n], "%s/%s/%s", p->ns, p->name, p->uid) >= 0)
            n++;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

int ext_sched_unlisted_gone(struct ext_sched *s, const char *uid)
{
    int freed = 0;
    pthread_mutex_lock(&s->mu);
    struct pod *p = sched_smap_get(&s->pods, uid);
    if (p && p->unlisted && !p->binding) {
        sched_usage_drop(s, uid);
        freed = core_unreserve(s->c, uid, NULL) == 0;
        forget(s, p);
    }
    pthread_mutex_unlock(&s->mu);
    return freed;
}

int ext_sched_unschedulable_due(struct ext_sched *s, char **out, int max, double now,
                                double every)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        if (n < max && p->unschedulable && !core_alloc_find(s->c, p->uid) &&
            (!p->evented_at || now - p->evented_at >= every) &&
            asprintf(&out[n], "%s/%s", p->ns, p->name) >= 0) {
            n++;
            p->evented_at = now;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* /filters wait for binds only while binds come: one in the last this many seconds */
#define BINDS_SEEN_S 300.0

void sched_expect_bind(struct ext_sched *s, const char *uid)
{
    /* a uid that does not fit would never match its own bind */
    if (s->opts.filter_wait <= 0 || s->last_bind <= 0 ||
        gs_mono_s() - s->last_bind > BINDS_SEEN_S || strlen(uid) >= sizeof s->expect_uid)
        return;
    snprintf(s->expect_uid, sizeof s->expect_uid, "%s", uid);
    s->expect_until = gs_mono_s() + s->opts.filter_wait;
}

void sched_expect_bind_again(struct ext_sched *s, const char *uid)
{
    if (s->expect_until > 0 && strcmp(s->expect_uid, uid) == 0)
        s->expect_until = gs_mono_s() + s->opts.filter_wait;
}

void sched_bind_arrived(struct ext_sched *s, const char *uid)
{
    s->last_bind = gs_mono_s();
    if (s->expect_until > 0 && strcmp(s->expect_uid, uid) == 0) {
        s->expect_until = 0;
        pthread_cond_broadcast(&s->bind_came);
    }
}

int sched_await_bind(struct ext_sched *s, const char *uid, int wait)
{
    int waited = 0;
    double start = gs_mono_s(), limit = start + s->opts.filter_wait; /* however often the
                                                                      expectation moves */
    while (s->expect_until > 0 && strcmp(s->expect_uid, uid) != 0) {
        double now = gs_mono_s(), until = s->expect_until < limit ? s->expect_until : limit;
        if (now >= until) {
            if (now >= s->expect_until)
                s->expect_until = 0; /* it is not coming: kube-scheduler failed that pod */
            metric_observe(s->m_filter_waits, (const char *[]){"timeout"}, now - start);
            return 0;
        }
        if (!wait)
            return 1;
        struct timespec ts = gs_mono_ts(until);
        waited = 1;
        pthread_cond_timedwait(&s->bind_came, &s->mu, &ts);
    }
    if (waited)
        metric_observe(s->m_filter_waits, (const char *[]){"bound"}, gs_mono_s() - start);
    return 0;
}

int sched_pod_orphaned(const struct ext_sched *s, const struct pod *p)
{
    return s->commit.bind && !p->binding && !p->bound && !has_node_name(p) &&
           core_alloc_find(s->c, p->uid);
}

int sched_drop_orphan(struct ext_sched *s, struct pod *p, const char *verb)
{
    if (!p || !sched_pod_orphaned(s, p))
        return 0;
    const struct core_alloc *held = core_alloc_find(s->c, p->uid);
    log_warn("extender", "pod %s/%s: %s drops its assignment on %s, left without a Binding",
             p->ns, p->name, verb, held->node);
    core_unreserve_undo(s->c, p->uid, NULL);
    if (s->lock)
        ext_nodelock_clear(s->lock, p->uid);
    return 1;
}

int ext_sched_waiting(struct ext_sched *s, char **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        /* an orphaned assignment is waiting too: the next bind replaces it */
        if (n < max && !p->binding && !has_node_name(p) &&
            (!core_alloc_find(s->c, p->uid) || sched_pod_orphaned(s, p)) &&
            asprintf(&out[n], "%s/%s", p->ns, p->name) >= 0)
            n++;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- nodes ----------------------------------------------------------------- */

int sched_upsert_locked(struct ext_sched *s, const json_t *node, struct gs_err *e)
{
    struct core_node_spec spec;
    struct ext_node_buf buf;
    struct ext_devcap cap;
    double updated;
    int rc = ext_node_spec(node, s->opts.names, &spec, &buf, &updated, e);
    if (rc < 0)
        return rc;
    if ((rc = ext_devcap_parse(node, s->opts.names, &cap, e)) < 0) {
        ext_node_buf_clear(&buf);
        return rc;
    }
    int before = core_cluster_node_count(s->c);
    /* the pods that hold GPUs here: the update drops those whose GPU (or
     * MIG instance) is gone */
    const struct core_node *was = core_cluster_find(s->c, spec.name);
    int n_held = 0;
    char (*held)[sizeof ((struct core_alloc *)0)->pod_uid] = NULL;
    for (const struct core_alloc *a = was ? core_node_alloc_next(was, NULL) : NULL; a;
         a = core_node_alloc_next(was, a))
        n_held++;
    if (n_held && !(held = malloc((size_t)n_held * sizeof *held)))
        n_held = 0;
    n_held = 0;
    for (const struct core_alloc *a = held ? core_node_alloc_next(was, NULL) : NULL; a;
         a = core_node_alloc_next(was, a))
        memcpy(held[n_held++], a->pod_uid, sizeof *held);
    /* the node's stamp moves with every upsert, so kept verdicts see a
     * change of its device counts too */
    rc = core_cluster_upsert_node(s->c, &spec, e);
    if (core_cluster_node_count(s->c) != before)
        s->node_gen++;
    for (int i = 0; rc == 0 && i < n_held; i++) {
        struct pod *p;
        if (core_alloc_find(s->c, held[i]))
            continue;
        /* its pod waits for them to come back (restore_pod: need_restore) */
        p = sched_smap_get(&s->pods, held[i]);
        log_warn("extender", "node %s: a GPU or MIG instance that pod %s%s%s holds is gone; %s",
                 spec.name, p ? p->ns : "uid ", p ? "/" : "", p ? p->name : held[i],
                 p ? "its GPUs are taken again when the GPU comes back"
                   : "its GPUs are no longer counted");
        if (p)
            restore_pod(s, p);
    }
    free(held);
    if (rc == 0) {
        sched_usage_push(s, spec.name); /* a new node: its pods may have come first */
        struct node_info *t = sched_smap_get(&s->inv, spec.name);
        if (!t && (t = calloc(1, sizeof *t)) && sched_smap_put(&s->inv, spec.name, t) < 0) {
            free(t);
            t = NULL;
        }
        if (t) {
            const json_t *ni = json_object_get(json_object_get(node, "status"), "nodeInfo");
            const json_t *kv = json_object_get(ni, "kubeletVersion");
            s->n_devcap += cap.known - t->cap.known;
            t->updated_at = updated;
            t->cap = cap;
            t->kubelet = json_is_string(kv) && *json_string_value(kv);
        }
    }
    ext_node_buf_clear(&buf);
    return rc;
}

static int remove_locked(struct ext_sched *s, const char *name, struct gs_err *e)
{
    int rc = core_cluster_remove_node(s->c, name, e);
    if (rc == 0)
        s->node_gen++;
    /* the pods whose assignment names it wait for it to come back (deleted
     * and registered again, its pods kept): restore_pod marks them */
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        const char *on = ext_annot_node(
            json_object_get(json_object_get(p->obj, "metadata"), "annotations"),
            s->opts.names->annot_prefix);
        if (rc == 0 && !p->need_restore && on && strcmp(on, name) == 0)
            restore_pod(s, p);
    }
    struct node_info *t = sched_smap_del(&s->inv, name);
    if (t)
        s->n_devcap -= t->cap.known;
    free(t);
    return rc;
}

int ext_sched_upsert_node(struct ext_sched *s, const json_t *node, struct gs_err *e)
{
    pthread_mutex_lock(&s->mu);
    int rc = sched_upsert_locked(s, node, e);
    if (rc == 0)
        retry_restores(s);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ext_sched_remove_node(struct ext_sched *s, const char *name, struct gs_err *e)
{
    pthread_mutex_lock(&s->mu);
    int rc = remove_locked(s, name, e);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

int ext_sched_replace_nodes(struct ext_sched *s, const json_t *items)
{
    struct smap keep = {0};
    const json_t *node;
    size_t i;
    int bad = 0;

    pthread_mutex_lock(&s->mu);
    json_array_foreach(items, i, node)
    {
        struct gs_err e = GS_ERR_INIT;
        const char *name = kube_meta_str(node, "name");
        if (sched_upsert_locked(s, node, &e) < 0) {
            log_warn("extender", "node %s: %s", name ? name : "?", e.msg);
            bad++;
        }
        if (name && !sched_smap_get(&keep, name))
            sched_smap_put(&keep, name, (void *)1);
    }
    for (int k = core_cluster_node_count(s->c) - 1; k >= 0; k--) {
        char *name = strdup(core_cluster_node(s->c, k)->name);
        if (name && !sched_smap_get(&keep, name)) {
            remove_locked(s, name, NULL);
        }
        free(name);
    }
    SMAP_FOREACH(&keep, it) sched_smap_del(&keep, it->key);
    free(keep.b);
    retry_restores(s);
    pthread_mutex_unlock(&s->mu);
    return bad;
}

int ext_sched_check_inventory(struct ext_sched *s, double now, double ttl_s)
{
    int stale = 0;
    pthread_mutex_lock(&s->mu);
    SMAP_FOREACH(&s->inv, it)
    {
        double t = ((struct node_info *)it->val)->updated_at;
        int ok = t == 0 || ttl_s <= 0 || now - t <= ttl_s;
        struct core_node *n = core_cluster_find(s->c, it->key);
        if (!n)
            continue;
        if (n->available != ok) {
            core_cluster_set_available(s->c, it->key, ok, NULL);
            log_warn("extender", "node %s: GPU inventory %s", it->key,
                     ok ? "is fresh again" : "is stale: no new GPU pods until it refreshes");
        }
        stale += !ok;
    }
    pthread_mutex_unlock(&s->mu);
    if (s->m_stale)
        metric_set(s->m_stale, NULL, stale);
    return stale;
}

/* Has kubelet the devices the pod needs on n (ext/devices.h)? 1 yes; 0 no,
 * with *st (optional) filled as a filter rejection. Lock held. */
int sched_devices_fit(struct ext_sched *s, const struct core_node *n, const struct core_pod *pod,
                      struct core_status *st)
{
    if (!s->n_devcap || pod->req.kind == CORE_REQ_NONE)
        return 1;
    const struct node_info *t = sched_smap_get(&s->inv, n->name);
    return !t || ext_devcap_fits(&t->cap, n, pod, s->opts.names, st);
}

/* The whole verdict on one node: the core's filters, then kubelet's device
 * count. Lock held. */
int sched_node_fits(struct ext_sched *s, const struct core_node *n, const struct core_pod *pod,
                    struct core_status *st)
{
    return core_filter(s->c, n, pod, st) && sched_devices_fit(s, n, pod, st);
}
