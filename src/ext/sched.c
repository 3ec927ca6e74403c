/* ext/sched.c - see sched.h. */
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
#include "kube/client.h"
#include "util/buf.h"
#include "util/log.h"

/* ---- a small string-keyed hash map ---------------------------------------- */

struct entry {
    char *key;
    void *val;
    struct entry *next;
};

struct smap {
    struct entry **b;
    size_t nb, n;
};

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

static void *smap_get(const struct smap *m, const char *k)
{
    if (!m->nb)
        return NULL;
    for (struct entry *e = m->b[hash(k) & (m->nb - 1)]; e; e = e->next)
        if (strcmp(e->key, k) == 0)
            return e->val;
    return NULL;
}

static int smap_put(struct smap *m, const char *k, void *v)
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

static void *smap_del(struct smap *m, const char *k)
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

#define SMAP_FOREACH(m, it)                                                    \
    for (size_t i_##it = 0; i_##it < (m)->nb; i_##it++)                        \
        for (struct entry *it = (m)->b[i_##it], *nx_##it; it && ((nx_##it = it->next), 1); \
             it = nx_##it)

/* ---- state ---------------------------------------------------------------- */

/* NodeNames arrays remembered: /filter's candidates and /prioritize's
 * (/filter's answer, one per pod shape): enough for the pods of seven or
 * more shapes in turn (bench/extender-loop.sh), each ~0.3 MB at 5,000 nodes. */
#define EXT_NAMELISTS 16
/* Answers kept (ext/memo.h): a /filter and a /prioritize entry per list
 * and pod shape, for 16 shapes at once (test_ext_memo's test_shapes). */
#define EXT_MEMO_SLOTS 32

/* What the extender keeps of a node beside the core's model. */
struct node_info {
    double updated_at;      /* inventory time (0: none) */
    struct ext_devcap cap;  /* kubelet's device counts (ext/devices.h) */
    int kubelet;            /* a kubelet registered it (status.nodeInfo.kubeletVersion) */
};

/* A pod the extender has seen. */
struct pod {
    char uid[64], ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
    json_t *obj;          /* the Pod object (for /bind and rebuilds) */
    int unschedulable;    /* its last /filter found no node */
    int need_restore;     /* assignment annotations whose node is not known yet */
    int binding;          /* a /bind is committing its allocation right now */
    int bound;            /* this replica's /bind committed its allocation */
    int bind_busy;        /* its /bind was answered 503 for a held node (node lock) and
                             it has not bound since: kube-scheduler parked it */
    unsigned long seq;    /* last touched */
    struct pod *older, *newer; /* the eviction order (see evict) */
};

struct ext_sched {
    pthread_mutex_t mu;
    struct core_cluster *c;
    const struct core_policy *policy;
    struct ext_sched_opts opts;
    struct ext_commit commit;
    struct smap pods;     /* uid -> struct pod */
    struct pod *oldest, *newest; /* the pods, least recently remembered first */
    struct smap inv;      /* node name -> struct node_info */
    struct ext_nodelock *lock; /* one pending GPU pod per node (cluster mode), or NULL */
    int n_devcap;         /* nodes whose allocatable device counts are known */
    /* NodeNames arrays seen lately (ext/namelist.h); their node positions
     * are valid while node_gen, bumped whenever a node comes or goes, is
     * what they were resolved at */
    struct ext_namecache *lists;
    unsigned long node_gen;
    int n_bind_busy;      /* pods with bind_busy set */
    int released;         /* a node lock was released since the last check */
    struct ext_memo *memo;
    unsigned long seq;
    int n_need_restore;
    struct metric *m_kept, *m_redecided; /* kept answers (ext/memo.h) */
    struct metric *m_decisions, *m_gpus, *m_gpus_alloc, *m_gpus_free, *m_mem_alloc,
        *m_milli_alloc, *m_frag, *m_allocs, *m_stale;
    struct core_quotas *quotas; /* GPUQuotas; usage is recounted from c when read */
    struct metric *m_ns_usage, *m_quota_limit, *m_quota_used;
};

json_t *ext_error(const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return json_pack("{s:s, s:s}", "error", msg, "Error", msg);
}

static void decision(struct ext_sched *s, const char *verb, const char *result)
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
    if (!(s->policy = core_policy_find(pname))) {
        free(s);
        return gs_errf(e, GS_EINVAL, "policy: '%s' is not a known policy", pname);
    }
    if (smap_reserve(&s->pods, s->opts.max_pods) < 0 || !(s->c = core_cluster_new()) ||
        !(s->quotas = core_quotas_new()) ||
        !(s->lists = ext_namecache_new(EXT_NAMELISTS)) || !(s->memo = ext_memo_new(EXT_MEMO_SLOTS))) {
        ext_namecache_free(s->lists);
        core_cluster_free(s->c);
        core_quotas_free(s->quotas);
        free(s->pods.b);
        free(s);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    pthread_mutex_init(&s->mu, NULL);
    s->node_gen = 1;
    if (opts->metrics) {
        struct metrics *m = opts->metrics;
        s->m_decisions = metrics_add(m, METRIC_COUNTER, "gpusched_extender_decisions_total",
                                     "Extender decisions by verb and result.", "verb,result",
                                     NULL, 0, e);
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
        free(p);
    }
}

void ext_sched_free(struct ext_sched *s)
{
    if (!s)
        return;
    SMAP_FOREACH(&s->pods, it) pod_free(smap_del(&s->pods, it->key));
    SMAP_FOREACH(&s->inv, it) free(smap_del(&s->inv, it->key));
    free(s->pods.b);
    free(s->inv.b);
    core_cluster_free(s->c);
    core_quotas_free(s->quotas);
    ext_memo_free(s->memo);
    ext_namecache_free(s->lists);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

void ext_sched_set_quotas(struct ext_sched *s, struct core_quotas *q)
{
    pthread_mutex_lock(&s->mu);
    core_quotas_free(s->quotas);
    s->quotas = q;
    pthread_mutex_unlock(&s->mu);
}

/* Brings quota usage up to date for a pod of `ns`; 1 when ns has a quota.
 * Called with the lock held. */
static int quota_prepare(struct ext_sched *s, const struct core_pod *pod)
{
    if (pod->req.kind == CORE_REQ_NONE || !s->quotas || !core_quotas_has(s->quotas, pod->ns))
        return 0;
    core_quotas_recount(s->quotas, s->c, pod->ns, NULL);
    return 1;
}

/* Would the pod on node n exceed its namespace's quota? Lock held. */
static int quota_blocks(struct ext_sched *s, const struct core_pod *pod, const struct core_node *n,
                        struct gs_err *e)
{
    struct core_quota_use u;
    core_quota_use_on_node(&pod->req, n, &u);
    return core_quotas_check(s->quotas, pod->ns, &u, 1, e) < 0;
}

void ext_sched_set_commit(struct ext_sched *s, const struct ext_commit *c) { s->commit = *c; }
void ext_sched_set_nodelock(struct ext_sched *s, struct ext_nodelock *l) { s->lock = l; }

static double wall_now(void)
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

static struct pod *find_by_name(struct ext_sched *s, const char *ns, const char *name)
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
        if (!core_alloc_find(s->c, p->uid) && !p->need_restore) {
            forget(s, p);
            return;
        }
        to_newest(s, p);
    }
}

/* Remembers (or refreshes) a pod; the key is its UID, or NS/NAME without one. */
static struct pod *remember(struct ext_sched *s, const json_t *obj)
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
    if (!(p = smap_get(&s->pods, key))) {
        if (s->pods.n >= s->opts.max_pods)
            evict(s);
        if (!(p = calloc(1, sizeof *p)))
            return NULL;
        snprintf(p->uid, sizeof p->uid, "%s", key);
        snprintf(p->ns, sizeof p->ns, "%s", ns);
        snprintf(p->name, sizeof p->name, "%s", name);
        if (smap_put(&s->pods, key, p) < 0) {
            free(p);
            return NULL;
        }
    }
    if (p->obj != obj) {
        json_decref(p->obj);
        p->obj = json_incref((json_t *)obj);
    }
    p->seq = ++s->seq;
    to_newest(s, p);
    return p;
}

static void set_bind_busy(struct ext_sched *s, struct pod *p, int v)
{
    if (p->bind_busy != v)
        s->n_bind_busy += v ? 1 : -1;
    p->bind_busy = v;
}

static void forget(struct ext_sched *s, struct pod *p)
{
    if (s->lock)
        s->released |= ext_nodelock_clear(s->lock, p->uid);
    set_bind_busy(s, p, 0);
    if (p->need_restore)
        s->n_need_restore--;
    unlink_pod(s, p);
    pod_free(smap_del(&s->pods, p->uid));
}

static int32_t pod_priority(const json_t *pod)
{
    const json_t *v = json_object_get(json_object_get(pod, "spec"), "priority");
    return json_is_integer(v) ? (int32_t)json_integer_value(v) : 0;
}

/* Reserves an allocation from annotations; called with the lock held. */
static int restore_locked(struct ext_sched *s, const char *uid, const char *ns, const char *name,
                          int32_t priority, int64_t cpu, int64_t mem, const json_t *annotations,
                          struct gs_err *e)
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
    if ((rc = ext_annot_parse(s->c, annotations, s->opts.names->annot_prefix, &a, e)) < 0)
        return rc;
    return core_reserve(s->c, &a, e);
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
    int rc = restore_locked(s, uid, ns, name, (int32_t)prio, cpu, mem, ann, e);
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* Restores the allocation a pod object's annotations record, if any. */
static void restore_pod(struct ext_sched *s, struct pod *p)
{
    struct gs_err e = GS_ERR_INIT;
    const json_t *ann = json_object_get(json_object_get(p->obj, "metadata"), "annotations");
    struct core_pod cp;
    int64_t cpu = 0, mem = 0;
    int rc;

    if (p->need_restore) {
        p->need_restore = 0;
        s->n_need_restore--;
    }
    if (!ext_annot_node(ann, s->opts.names->annot_prefix) || core_alloc_find(s->c, p->uid))
        return;
    if (core_pod_parse(p->obj, s->opts.names, &cp, &e) == 0) {
        cpu = cp.req.cpu_milli;
        mem = cp.req.mem_bytes;
        core_pod_clear(&cp);
    }
    rc = restore_locked(s, p->uid, p->ns, p->name, pod_priority(p->obj), cpu, mem, ann, &e);
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

int ext_sched_release(struct ext_sched *s, const char *who, struct gs_err *e)
{
    struct pod *p;
    char uid[64];
    int rc;

    pthread_mutex_lock(&s->mu);
    snprintf(uid, sizeof uid, "%s", who);
    if (!core_alloc_find(s->c, who) && strchr(who, '/')) {
        char ns[CORE_NAME_MAX];
        const char *slash = strchr(who, '/');
        snprintf(ns, sizeof ns, "%.*s", (int)(slash - who), who);
        p = find_by_name(s, ns, slash + 1);
        if (p)
            snprintf(uid, sizeof uid, "%s", p->uid);
        else /* allocations restored from a journal have no pod object */
            for (int i = 0; i < core_cluster_alloc_count(s->c); i++)
                if (strcmp(core_cluster_alloc(s->c, i)->pod_name, who) == 0)
                    snprintf(uid, sizeof uid, "%s", core_cluster_alloc(s->c, i)->pod_uid);
    }
    rc = core_unreserve(s->c, uid, e);
    if (rc == 0 && (p = smap_get(&s->pods, uid)))
        forget(s, p);
    pthread_mutex_unlock(&s->mu);
    if (rc < 0)
        return gs_errf(e, GS_ENOENT, "pod %s holds no GPUs", who);
    decision(s, "release", "released");
    if (s->commit.release && (rc = s->commit.release(s->commit.ud, uid, e)) < 0)
        return rc;
    return 0;
}

static int finished(const json_t *pod)
{
    const json_t *ph = json_object_get(json_object_get(pod, "status"), "phase");
    const char *v = json_is_string(ph) ? json_string_value(ph) : "";
    return strcmp(v, "Succeeded") == 0 || strcmp(v, "Failed") == 0;
}

/* Does a pod with an assignment still wait for kubelet (nodelock.h)? Not
 * once the device plugin marked it allocated, nor once kubelet reported it
 * (status.startTime: admitted). *since: its assigned-at. */
static int waits_for_kubelet(struct ext_sched *s, const json_t *pod, const json_t *ann,
                             double *since)
{
    char key[300];
    const json_t *st = json_object_get(pod, "status");
    snprintf(key, sizeof key, "%sallocated-at", s->opts.names->annot_prefix);
    if (json_object_get(ann, key) || json_is_string(json_object_get(st, "startTime")))
        return 0;
    snprintf(key, sizeof key, "%sassigned-at", s->opts.names->annot_prefix);
    const json_t *at = json_object_get(ann, key);
    if (!json_is_string(at) || kube_parse_time(json_string_value(at), since) < 0)
        *since = wall_now();
    return 1;
}

/* Records in the node lock whether an assigned pod still holds its node. */
static void lock_observe(struct ext_sched *s, struct pod *p, const json_t *ann)
{
    const char *node = ext_annot_node(ann, s->opts.names->annot_prefix);
    double since;
    char name[2 * CORE_NAME_MAX];
    if (!s->lock)
        return;
    if (node && waits_for_kubelet(s, p->obj, ann, &since)) {
        snprintf(name, sizeof name, "%s/%s", p->ns, p->name);
        ext_nodelock_set(s->lock, p->uid, name, node, since);
    } else {
        s->released |= ext_nodelock_clear(s->lock, p->uid);
    }
}

static int observe_locked(struct ext_sched *s, const json_t *pod, int deleted)
{
    const char *uid, *ns, *name;
    struct pod *p;
    int freed = 0;

    pod_identity(pod, &uid, &ns, &name);
    if (!uid || !*uid || !name)
        return 0;
    if ((p = smap_get(&s->pods, uid)))
        p->seq = ++s->seq; /* seen (ext_sched_replace_pods counts on it) */
    if (deleted || finished(pod)) {
        freed = core_unreserve(s->c, uid, NULL) == 0;
        if ((p = smap_get(&s->pods, uid)))
            forget(s, p);
        else if (s->lock)
            s->released |= ext_nodelock_clear(s->lock, uid);
        return freed;
    }
    const json_t *ann = json_object_get(json_object_get(pod, "metadata"), "annotations");
    const json_t *node = json_object_get(json_object_get(pod, "spec"), "nodeName");
    if (ext_annot_node(ann, s->opts.names->annot_prefix)) {
        if ((p = remember(s, pod))) {
            p->unschedulable = 0;
            restore_pod(s, p);
            lock_observe(s, p, ann);
        }
        return 0;
    }
    if (json_is_string(node) && *json_string_value(node)) {
        /* running without an assignment: not a GPU pod of ours */
        if ((p = smap_get(&s->pods, uid)) && !core_alloc_find(s->c, uid))
            forget(s, p);
        return 0;
    }
    /* pending without an assignment: an allocation it still holds came from
     * annotations that are gone (a failed bind was undone), unless a bind is
     * committing it right now or committed it (then this view predates the
     * annotations: a list taken before the patch) */
    if ((p = smap_get(&s->pods, uid)) && !p->binding && !p->bound && core_alloc_find(s->c, uid))
        freed = core_unreserve(s->c, uid, NULL) == 0;
    /* remember GPU pods for /bind (their request is parsed there) */
    struct core_pod cp;
    if (core_pod_parse(pod, s->opts.names, &cp, NULL) == 0) {
        if (cp.req.kind != CORE_REQ_NONE)
            remember(s, pod);
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
    s->released = 0;
    pthread_mutex_unlock(&s->mu);
    return freed;
}

void ext_sched_bind_gave_up(struct ext_sched *s, const char *uid)
{
    pthread_mutex_lock(&s->mu);
    struct pod *p = smap_get(&s->pods, uid);
    if (p)
        set_bind_busy(s, p, 1);
    pthread_mutex_unlock(&s->mu);
}

int ext_sched_bind_retries(struct ext_sched *s, char **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        if (n < max && p->bind_busy && !p->binding && !core_alloc_find(s->c, p->uid) &&
            asprintf(&out[n], "%s/%s", p->ns, p->name) >= 0) {
            set_bind_busy(s, p, 0);
            n++;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* A pod whose allocation survives a relist: a bind is committing it, or
 * this replica committed it and the list may have been taken before its
 * annotations were written (the watch delivers them next). */
static int keeps_through_relist(const struct pod *p) { return p && (p->binding || p->bound); }

void ext_sched_replace_pods(struct ext_sched *s, const json_t *items)
{
    size_t i;
    const json_t *pod;
    pthread_mutex_lock(&s->mu);
    for (int k = 0; k < core_cluster_alloc_count(s->c);) {
        const struct core_alloc *a = core_cluster_alloc(s->c, k);
        if (keeps_through_relist(smap_get(&s->pods, a->pod_uid)))
            k++;
        else
            core_unreserve(s->c, a->pod_uid, NULL);
    }
    SMAP_FOREACH(&s->pods, it)
    {
        if (!keeps_through_relist(it->val) || !core_alloc_find(s->c, it->key))
            forget(s, it->val);
    }
    unsigned long before = s->seq;
    json_array_foreach(items, i, pod) observe_locked(s, pod, 0);
    /* a kept pod the list does not have was deleted while we were away,
     * unless its bind is still committing (that commit then fails and
     * undoes itself) */
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        if (p->seq <= before && !p->binding) {
            core_unreserve(s->c, p->uid, NULL);
            forget(s, p);
        }
    }
    int n = core_cluster_alloc_count(s->c);
    pthread_mutex_unlock(&s->mu);
    log_info("extender", "rebuilt the allocation state from %zu pods: %d hold GPUs",
             json_array_size(items), n);
}

int ext_sched_unschedulable(struct ext_sched *s, char **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        if (n < max && p->unschedulable && !core_alloc_find(s->c, p->uid) &&
            asprintf(&out[n], "%s/%s", p->ns, p->name) >= 0)
            n++;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

int ext_sched_waiting(struct ext_sched *s, char **out, int max)
{
    int n = 0;
    pthread_mutex_lock(&s->mu);
    SMAP_FOREACH(&s->pods, it)
    {
        struct pod *p = it->val;
        const char *node = json_string_value(
            json_object_get(json_object_get(p->obj, "spec"), "nodeName"));
        if (n < max && !p->binding && (!node || !*node) && !core_alloc_find(s->c, p->uid) &&
            asprintf(&out[n], "%s/%s", p->ns, p->name) >= 0)
            n++;
    }
    pthread_mutex_unlock(&s->mu);
    return n;
}

/* ---- nodes ----------------------------------------------------------------- */

static int upsert_locked(struct ext_sched *s, const json_t *node, struct gs_err *e)
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
    /* the node's stamp moves with every upsert, so kept verdicts see a
     * change of its device counts too */
    rc = core_cluster_upsert_node(s->c, &spec, e);
    if (core_cluster_node_count(s->c) != before)
        s->node_gen++;
    if (rc == 0) {
        struct node_info *t = smap_get(&s->inv, spec.name);
        if (!t && (t = calloc(1, sizeof *t)) && smap_put(&s->inv, spec.name, t) < 0) {
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
    struct node_info *t = smap_del(&s->inv, name);
    if (t)
        s->n_devcap -= t->cap.known;
    free(t);
    return rc;
}

int ext_sched_upsert_node(struct ext_sched *s, const json_t *node, struct gs_err *e)
{
    pthread_mutex_lock(&s->mu);
    int rc = upsert_locked(s, node, e);
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
        if (upsert_locked(s, node, &e) < 0) {
            log_warn("extender", "node %s: %s", name ? name : "?", e.msg);
            bad++;
        }
        if (name && !smap_get(&keep, name))
            smap_put(&keep, name, (void *)1);
    }
    for (int k = core_cluster_node_count(s->c) - 1; k >= 0; k--) {
        char *name = strdup(core_cluster_node(s->c, k)->name);
        if (name && !smap_get(&keep, name)) {
            remove_locked(s, name, NULL);
        }
        free(name);
    }
    SMAP_FOREACH(&keep, it) smap_del(&keep, it->key);
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
static int devices_fit(struct ext_sched *s, const struct core_node *n, const struct core_pod *pod,
                       struct core_status *st)
{
    if (!s->n_devcap || pod->req.kind == CORE_REQ_NONE)
        return 1;
    const struct node_info *t = smap_get(&s->inv, n->name);
    return !t || ext_devcap_fits(&t->cap, n, pod, s->opts.names, st);
}

/* The whole verdict on one node: the core's filters, then kubelet's device
 * count. Lock held. */
static int node_fits(struct ext_sched *s, const struct core_node *n, const struct core_pod *pod,
                     struct core_status *st)
{
    return core_filter(s->c, n, pod, st) && devices_fit(s, n, pod, st);
}

/* ---- replies ----------------------------------------------------------------- */

/* Takes the text of a string builder as the reply (or a tree on OOM). */
static void reply_text(struct ext_reply *r, struct gs_buf *b)
{
    if (b->oom) {
        free(b->buf);
        r->json = ext_error("out of memory");
        return;
    }
    r->text = b->buf;
    r->len = b->len;
}

char *ext_reply_take(struct ext_reply *r, size_t *len)
{
    char *out = r->text;
    if (r->shared) {
        out = malloc(r->shared->len + 1);
        if (out)
            memcpy(out, r->shared->buf, r->shared->len + 1);
        *len = out ? r->shared->len : 0;
        ext_text_put(r->shared);
    } else if (out) {
        *len = r->len;
    } else {
        out = r->json ? json_dumps(r->json, JSON_COMPACT) : NULL;
        if (!out)
            out = strdup("{}");
        *len = out ? strlen(out) : 0;
    }
    json_decref(r->json);
    memset(r, 0, sizeof *r);
    return out;
}

/* ---- the verbs ------------------------------------------------------------- */

/* Parses the Pod of a request and picks its policy. Returns 0, or fills
 * *reply with a 200 "Error" answer and returns -1. */
static int pod_and_policy(struct ext_sched *s, const json_t *obj, struct core_pod *pod,
                          const struct core_policy **pol, json_t **reply)
{
    struct gs_err e = GS_ERR_INIT;
    if (core_pod_parse(obj, s->opts.names, pod, &e) < 0) {
        *reply = ext_error("pod %s: %s", kube_meta_str(obj, "name"), e.msg);
        return -1;
    }
    *pol = s->policy;
    if (pod->policy[0] && !(*pol = core_policy_find(pod->policy))) {
        *reply = ext_error("pod %s/%s: annotation %spolicy: '%s' is not a known policy", pod->ns,
                           pod->name, s->opts.names->annot_prefix, pod->policy);
        core_pod_clear(pod);
        return -1;
    }
    return 0;
}

/* Appends ,"node":"reason" to a FailedNodes map being built. */
static void add_reason(struct gs_buf *b, const char *node, const char *reason)
{
    gs_buf_put(b, ",\"", 2);
    gs_buf_str(b, node);
    gs_buf_put(b, "\":", 2);
    gs_buf_json_str(b, reason);
}

/* A NodeNames list's positions in the core's node array (-1: unknown),
 * looked up again only when nodes came or went since. Lock held. */
static const int *list_positions(struct ext_sched *s, struct ext_namelist *l)
{
    if (l->gen != s->node_gen) {
        for (int i = 0; i < l->n; i++) {
            const struct core_node *n = core_cluster_find(s->c, l->names[i]);
            l->pos[i] = n ? core_node_pos(n) : -1;
        }
        l->gen = s->node_gen;
    }
    return l->pos;
}

/* The request's nodes (NULL: not in the cluster): a NodeNames list by its
 * positions, full Nodes by name. Lock held. */
static void resolve(struct ext_sched *s, const struct ext_args *a, struct core_node **nodes)
{
    if (!a->list) {
        for (int i = 0; i < a->n; i++)
            nodes[i] = core_cluster_find(s->c, a->names[i]);
        return;
    }
    const int *pos = list_positions(s, a->list);
    for (int i = 0; i < a->n; i++)
        nodes[i] = pos[i] < 0 ? NULL : core_cluster_node(s->c, pos[i]);
}

struct scored {
    int idx, score;
};

static int by_score(const void *a, const void *b)
{
    const struct scored *x = a, *y = b;
    return x->score != y->score ? y->score - x->score : x->idx - y->idx;
}

/* The /filter reply: the fitting nodes (as full objects when the request
 * carried them), then the reasons gathered for the others. */
static void filter_reply(struct gs_buf *r, const struct ext_args *a, const unsigned char *fit,
                         const struct gs_buf *failed, const struct gs_buf *unres)
{
    if (a->from_nodes) {
        json_t *items = json_array();
        for (int i = 0; i < a->n; i++)
            if (fit[i])
                json_array_append(items, (json_t *)a->nodes[i]);
        json_t *list = json_pack("{s:s, s:s, s:o}", "apiVersion", "v1", "kind", "NodeList",
                                 "items", items);
        char *js = json_dumps(list, JSON_COMPACT | JSON_EMBED);
        json_decref(list);
        gs_buf_str(r, "{\"Nodes\":{");
        gs_buf_str(r, js ? js : "");
        gs_buf_str(r, "},\"NodeNames\":null");
        free(js);
    } else {
        /* runs of fitting nodes are copied from the list's own reply text */
        const char *q = a->list->quoted;
        const size_t *qo = a->list->qoff;
        gs_buf_reserve(r, failed->len + unres->len + qo[a->n] + 128); /* allocated once */
        gs_buf_str(r, "{\"Nodes\":null,\"NodeNames\":[");
        for (int i = 0, j, first = 1; i < a->n; i = j) {
            for (j = i; j < a->n && fit[j]; j++)
                ;
            if (j > i) {
                if (!first)
                    gs_buf_put(r, ",", 1);
                gs_buf_put(r, q + qo[i], qo[j] - qo[i] - 1);
                first = 0;
            } else {
                j++;
            }
        }
        gs_buf_put(r, "]", 1);
    }
    gs_buf_str(r, ",\"FailedNodes\":{");
    if (failed->buf)
        gs_buf_put(r, failed->buf + 1, failed->len - 1); /* drop the leading comma */
    gs_buf_str(r, "},\"FailedAndUnresolvableNodes\":{");
    if (unres->buf)
        gs_buf_put(r, unres->buf + 1, unres->len - 1);
    gs_buf_str(r, "},\"Error\":\"\"}");
    r->oom |= failed->oom | unres->oom;
}

static const char unknown_node[] = "node is unknown to gpusched (no Node object seen)";

/* Brings an entry's verdicts up to the cluster's state: only the nodes
 * whose state stamp moved since the entry saw them (every node of a new
 * entry) are decided again. pos: the nodes' positions (-1: unknown).
 * Returns 1 when a verdict or a reason changed (the kept reply is
 * dropped), 0 when none did, -1 when out of memory. Lock held. */
static int memo_decide(struct ext_sched *s, struct ext_memo_entry *en, const struct core_pod *pod,
                       const int *pos)
{
    uint64_t ver = core_cluster_version(s->c);
    const uint64_t *stamps = core_cluster_stamps(s->c);
    int k = 0, changed = 0, oom = 0;
    if (en->version == ver)
        return 0;
    int *idx = malloc(((size_t)en->n + 1) * sizeof *idx);
    struct core_node **sub = malloc(((size_t)en->n + 1) * sizeof *sub);
    unsigned char *subfit = malloc((size_t)en->n + 1);
    if (!idx || !sub || !subfit) {
        free(idx);
        free(sub);
        free(subfit);
        return -1;
    }
    for (int i = 0; i < en->n; i++) {
        uint64_t st = pos[i] < 0 ? 0 : stamps[pos[i]];
        if (en->fit[i] != EXT_FIT_UNSET && st == en->stamp[i])
            continue;
        en->stamp[i] = st;
        idx[k] = i;
        sub[k++] = pos[i] < 0 ? NULL : core_cluster_node(s->c, pos[i]);
    }
    core_filter_nodes(s->c, pod, sub, k, subfit, NULL);
    for (int j = 0; j < k; j++) {
        int i = idx[j], v = EXT_FIT_YES;
        struct core_status st;
        const char *why = NULL;
        if (!sub[j]) {
            v = EXT_FIT_UNKNOWN;
        } else if (!subfit[j] || !devices_fit(s, sub[j], pod, &st)) {
            if (!subfit[j])
                core_filter(s->c, sub[j], pod, &st);
            v = st.code == CORE_UNRESOLVABLE ? EXT_FIT_NEVER : EXT_FIT_NOW;
            why = st.reason;
        }
        if (v == en->fit[i] && (!why || strcmp(why, en->reason[i]) == 0))
            continue;
        changed = 1;
        en->nfit += (v == EXT_FIT_YES) - (en->fit[i] == EXT_FIT_YES);
        free(en->reason[i]);
        en->reason[i] = NULL;
        en->fit[i] = (unsigned char)v;
        if (why && !(en->reason[i] = strdup(why))) {
            en->nfit -= en->fit[i] == EXT_FIT_YES;
            en->fit[i] = EXT_FIT_UNSET; /* decided again next time */
            oom = 1;
        }
    }
    free(idx);
    free(sub);
    free(subfit);
    metric_add(s->m_redecided, NULL, k);
    if (changed || oom)
        ext_memo_set_reply(en, NULL);
    en->version = oom ? 0 : ver;
    return oom ? -1 : changed;
}

/* The start of /filter and /prioritize: the ExtenderArgs, the pod and its
 * policy, and whether the answer may be kept (ext/memo.h): for a GPU pod
 * asked about a NodeNames list, with the pod key in *key (the policy in it
 * for /prioritize: verdicts do not depend on it, scores do; a policy that
 * draws at random is never kept). Returns 0, or the HTTP status of the
 * error reply it wrote (nothing left to clear then). */
static int verb_start(struct ext_sched *s, const char *verb, const char *body, size_t len,
                      struct ext_args *a, struct core_pod *pod, const struct core_policy **pol,
                      int scores, char **key, size_t *klen, int *memo, struct ext_reply *out)
{
    struct gs_err e = GS_ERR_INIT;
    memset(out, 0, sizeof *out);
    *key = NULL;
    *klen = 0;
    if (ext_args_parse_cached(s->lists, body, len, a, &e) < 0) {
        out->json = ext_error("%s", e.msg);
        decision(s, verb, "bad_request");
        return 400;
    }
    if (pod_and_policy(s, a->pod, pod, pol, &out->json) < 0) {
        ext_args_clear(a);
        decision(s, verb, "error");
        /* a /filter error fails kube-scheduler's attempt; /prioritize errors
         * it ignores anyway */
        return scores ? 400 : 200;
    }
    *memo = pod->req.kind != CORE_REQ_NONE && a->list && ext_namelist_keepable(a->list) &&
            a->n <= EXT_MEMO_NODES_MAX && !(scores && ((*pol)->flags & CORE_POLICY_RANDOM_NODE)) &&
            ext_memo_key(pod, scores ? (*pol)->name : NULL, key, klen) == 0;
    return 0;
}

int ext_sched_filter(struct ext_sched *s, const char *body, size_t len, struct ext_reply *out)
{
    json_t **reply = &out->json;
    struct gs_err e = GS_ERR_INIT;
    struct ext_args a;
    struct core_pod pod;
    const struct core_policy *pol;
    char *key;
    size_t klen;
    int memo, rc = verb_start(s, "filter", body, len, &a, &pod, &pol, 0, &key, &klen, &memo, out);
    if (rc)
        return rc;
    int gpu = pod.req.kind != CORE_REQ_NONE;
    /* a GPU pod asked about a NodeNames list is answered from a kept entry,
     * any other from an entry of its own */
    struct gs_buf failed = {0}, unres = {0};
    /* per node: fits, and the node; a kept reply needs neither */
    unsigned char *fit = NULL;
    struct core_node **nodes = NULL;
    struct ext_memo_entry own = {0}, *en = NULL;
    int *own_pos = gpu && !memo ? malloc(((size_t)a.n + 1) * sizeof *own_pos) : NULL;
    struct ext_text *kept = NULL;
    int nfit = 0, modified = 0, ok = 1;
    unsigned long epoch = 0;
    uint64_t ver = 0;

    if (!memo && (!(fit = calloc((size_t)a.n + 1, 1)) ||
                  !(nodes = calloc((size_t)a.n + 1, sizeof *nodes)) ||
                  (gpu && (!own_pos || ext_memo_entry_init(&own, a.n) < 0)))) {
        free(key);
        ok = 0;
        goto done;
    }
    pthread_mutex_lock(&s->mu);
    struct pod *p = gpu ? remember(s, a.pod) : NULL;
    int quota = quota_prepare(s, &pod);
    if (!gpu) {
        memset(fit, 1, (size_t)a.n);
    } else if (!(en = memo ? ext_memo_get(s->memo, a.list, EXT_MEMO_FILTER, key, klen) : &own)) {
        ok = 0;
    } else {
        const int *pos = NULL;
        if (!memo) {
            resolve(s, &a, nodes);
            for (int i = 0; i < a.n && a.from_nodes; i++)
                if (!nodes[i] && upsert_locked(s, a.nodes[i], &e) == 0)
                    nodes[i] = core_cluster_find(s->c, a.names[i]);
            for (int i = 0; i < a.n; i++)
                own_pos[i] = nodes[i] ? core_node_pos(nodes[i]) : -1;
            pos = own_pos;
        } else {
            pos = list_positions(s, a.list);
        }
        ok = memo_decide(s, en, &pod, pos) >= 0;
        epoch = en->epoch;
        ver = en->version;
    }
    if (ok && en && memo && en->reply && !quota && s->opts.top_k <= 0) {
        kept = ext_text_ref(en->reply); /* nothing changed what it says */
        nfit = en->nfit;
    } else if (ok && en && memo && (!(fit = calloc((size_t)a.n + 1, 1)) ||
                                    !(nodes = calloc((size_t)a.n + 1, sizeof *nodes)))) {
        ok = 0;
    } else if (ok && en) {
        if (memo && (quota || s->opts.top_k > 0))
            resolve(s, &a, nodes);
        /* the verdicts, and the checks that are per request (quotas) */
        for (int i = 0; i < a.n; i++) {
            switch (en->fit[i]) {
            case EXT_FIT_YES:
                fit[i] = 1;
                if (quota && quota_blocks(s, &pod, nodes[i], &e)) {
                    fit[i] = 0;
                    modified = 1;
                    add_reason(&failed, a.names[i], e.msg);
                }
                break;
            case EXT_FIT_UNKNOWN: add_reason(&failed, a.names[i], unknown_node); break;
            case EXT_FIT_NEVER:
                /* in both maps: kube-scheduler < 1.21 reads only
                 * FailedNodes; newer ones let the unresolvable entry win */
                add_reason(&unres, a.names[i], en->reason[i]);
                add_reason(&failed, a.names[i], en->reason[i]);
                break;
            default: add_reason(&failed, a.names[i], en->reason[i]); break;
            }
        }
    }
    for (int i = 0; ok && !kept && i < a.n; i++)
        nfit += fit[i];
    /* top-k: keep the policy's best k feasible nodes */
    if (ok && !kept && s->opts.top_k > 0 && nfit > s->opts.top_k && gpu) {
        struct core_node **fn = calloc((size_t)nfit, sizeof *fn);
        int *sc = calloc((size_t)nfit, sizeof *sc);
        struct scored *order = calloc((size_t)nfit, sizeof *order);
        int k = 0;
        for (int i = 0; i < a.n; i++)
            if (fit[i])
                order[k].idx = i, fn[k++] = nodes[i];
        if (fn && sc && order && core_score(s->c, pol, &pod, fn, nfit, sc, &e) == 0) {
            for (k = 0; k < nfit; k++)
                order[k].score = sc[k];
            qsort(order, (size_t)nfit, sizeof *order, by_score);
            for (k = s->opts.top_k; k < nfit; k++) {
                char why[160];
                snprintf(why, sizeof why, "fits, but policy %s ranks it below its best %d nodes "
                         "(score %d)", pol->name, s->opts.top_k, order[k].score);
                fit[order[k].idx] = 0;
                add_reason(&failed, a.names[order[k].idx], why);
            }
            nfit = s->opts.top_k;
            modified = 1;
        }
        free(fn);
        free(sc);
        free(order);
    }
    if (ok && !kept && !modified && memo && en->reply)
        kept = ext_text_ref(en->reply); /* per-request checks changed nothing */
    if (p && ok)
        p->unschedulable = nfit == 0;
    pthread_mutex_unlock(&s->mu);
done:
    ext_memo_entry_clear(&own);
    free(own_pos);
    if (!ok) {
        *reply = ext_error("out of memory");
        decision(s, "filter", "error");
        free(failed.buf);
        free(unres.buf);
        free(fit);
        free(nodes);
        core_pod_clear(&pod);
        ext_args_clear(&a);
        return 500;
    }
    if (kept) {
        metric_inc(s->m_kept, (const char *[]){"filter"});
        out->shared = kept;
    } else {
        struct gs_buf r = {0};
        filter_reply(&r, &a, fit, &failed, &unres);
        if (memo && !modified && !r.oom) {
            /* kept for the next request that asks the same */
            if ((out->shared = ext_text_wrap(r.buf, r.len))) {
                pthread_mutex_lock(&s->mu);
                if (en->epoch == epoch && en->version == ver && !en->reply)
                    ext_memo_set_reply(en, ext_text_ref(out->shared));
                pthread_mutex_unlock(&s->mu);
            } else {
                *reply = ext_error("out of memory");
            }
        } else {
            reply_text(out, &r);
        }
    }
    free(failed.buf);
    free(unres.buf);
    decision(s, "filter", !gpu ? "no_gpu" : nfit ? "fit" : "no_fit");
    free(fit);
    free(nodes);
    core_pod_clear(&pod);
    ext_args_clear(&a);
    return 200;
}

int ext_sched_prioritize(struct ext_sched *s, const char *body, size_t len, struct ext_reply *out)
{
    json_t **reply = &out->json;
    struct gs_err e = GS_ERR_INIT;
    struct ext_args a;
    struct core_pod pod;
    const struct core_policy *pol;
    char *key;
    size_t klen;
    int memo, rc = verb_start(s, "prioritize", body, len, &a, &pod, &pol, 1, &key, &klen, &memo,
                              out);
    if (rc)
        return rc;
    int gpu = pod.req.kind != CORE_REQ_NONE;
    /* answered from a kept reply while the cluster's version has not moved:
     * scores are normalised over all feasible nodes, so any change starts
     * the answer again */
    struct ext_memo_entry *en = NULL;
    unsigned long epoch = 0;
    uint64_t ver = 0;

    pthread_mutex_lock(&s->mu);
    if (gpu)
        remember(s, a.pod);
    if (memo && (en = ext_memo_get(s->memo, a.list, EXT_MEMO_PRIORITIZE, key, klen))) {
        if (en->reply && en->version == core_cluster_version(s->c))
            out->shared = ext_text_ref(en->reply);
        epoch = en->epoch;
    }
    pthread_mutex_unlock(&s->mu);
    if (out->shared) {
        metric_inc(s->m_kept, (const char *[]){"prioritize"});
        decision(s, "prioritize", "scored");
        core_pod_clear(&pod);
        ext_args_clear(&a);
        return 200;
    }

    struct core_node **nodes = calloc((size_t)a.n + 1, sizeof *nodes);
    int *pos = calloc((size_t)a.n + 1, sizeof *pos), *sc = calloc((size_t)a.n + 1, sizeof *sc);
    int *out_scores = calloc((size_t)a.n + 1, sizeof *out_scores);
    unsigned char *fit = calloc((size_t)a.n + 1, 1);
    int k = 0, scored = 0;

    if (!nodes || !pos || !sc || !out_scores || !fit) {
        free(nodes);
        free(pos);
        free(sc);
        free(out_scores);
        free(fit);
        core_pod_clear(&pod);
        ext_args_clear(&a);
        *reply = ext_error("out of memory");
        decision(s, "prioritize", "error");
        return 500;
    }
    pthread_mutex_lock(&s->mu);
    if (gpu) {
        resolve(s, &a, nodes);
        for (int i = 0; i < a.n; i++)
            if (nodes[i]) {
                pos[k] = i;
                nodes[k++] = nodes[i];
            }
        /* the filters' verdicts kept in the entry (per list index, with the
         * node's state stamp): only the nodes whose state moved since are
         * filtered again; scores are normalised over all, so all are scored */
        const uint64_t *stamps = core_cluster_stamps(s->c);
        int keep = en && en->epoch == epoch && (en->fit || ext_memo_entry_init(en, a.n) == 0);
        for (int j = 0; j < k && keep; j++) {
            int i = pos[j];
            if (en->fit[i] && en->stamp[i] == stamps[core_node_pos(nodes[j])])
                fit[j] = en->fit[i];
        }
        scored = !k || core_score_fit(s->c, pol, &pod, nodes, k, fit, sc, &e) == 0;
        for (int j = 0; j < k && scored; j++) /* 0..100 -> kube-scheduler's 0..10 */
            out_scores[pos[j]] = (sc[j] * 10 + 50) / 100;
        for (int j = 0; j < k && keep; j++) {
            en->fit[pos[j]] = scored ? fit[j] : 0;
            en->stamp[pos[j]] = stamps[core_node_pos(nodes[j])];
        }
        ver = core_cluster_version(s->c);
    }
    pthread_mutex_unlock(&s->mu);

    struct gs_buf r = {0};
    size_t need = 2; /* the whole reply, so that it is allocated once */
    for (int i = 0; i < a.n; i++)
        need += (a.list ? a.list->len[i] : strlen(a.names[i])) +
                sizeof ",{\"Host\":\"\",\"Score\":10}";
    if (gs_buf_reserve(&r, need) == 0) {
        /* written in place: the buffer holds the whole reply */
        static const char host[] = "{\"Host\":\"", score[] = "\",\"Score\":";
        char *w = r.buf + r.len;
        *w++ = '[';
        for (int i = 0; i < a.n; i++) {
            size_t nl = a.list ? a.list->len[i] : strlen(a.names[i]);
            if (i)
                *w++ = ',';
            memcpy(w, host, sizeof host - 1);
            w += sizeof host - 1;
            memcpy(w, a.names[i], nl);
            w += nl;
            memcpy(w, score, sizeof score - 1);
            w += sizeof score - 1;
            if (out_scores[i] >= 10) /* scores are 0..10: two digits at most */
                *w++ = (char)('0' + out_scores[i] / 10);
            *w++ = (char)('0' + out_scores[i] % 10);
            *w++ = '}';
        }
        r.len = (size_t)(w - r.buf);
    }
    gs_buf_put(&r, "]", 1);
    if (en && scored && !r.oom) {
        /* kept while nothing changes: the same entry, the same version */
        if (!(out->shared = ext_text_wrap(r.buf, r.len))) {
            *reply = ext_error("out of memory");
        } else {
            pthread_mutex_lock(&s->mu);
            if (en->epoch == epoch && core_cluster_version(s->c) == ver) {
                en->version = ver;
                ext_memo_set_reply(en, ext_text_ref(out->shared));
            }
            pthread_mutex_unlock(&s->mu);
        }
    } else {
        reply_text(out, &r);
    }
    decision(s, "prioritize", gpu ? "scored" : "no_gpu");
    free(nodes);
    free(pos);
    free(sc);
    free(out_scores);
    free(fit);
    core_pod_clear(&pod);
    ext_args_clear(&a);
    return 200;
}

static int status_for(int rc)
{
    switch (-rc) {
    case GS_ENOENT: return 404;
    case GS_ECONFLICT:
    case GS_ENOFIT: return 409;
    case GS_EUNAVAIL: return 503;
    case GS_EINVAL: return 400;
    default: return 500;
    }
}

int ext_sched_bind(struct ext_sched *s, const char *body, size_t len, struct ext_reply *out)
{
    json_t **reply = &out->json;
    memset(out, 0, sizeof *out);
    struct gs_err e = GS_ERR_INIT;
    struct ext_bind b;
    struct core_pod pod;
    const struct core_policy *pol;
    struct core_alloc alloc;
    struct pod *p;
    json_t *ann = NULL, *err = NULL;
    int rc;

    if (ext_bind_parse(body, len, &b, &e) < 0) {
        *reply = ext_error("%s", e.msg);
        decision(s, "bind", "bad_request");
        return 400;
    }
    if (s->commit.may_bind && !s->commit.may_bind(s->commit.ud)) {
        *reply = ext_error("this replica is not the leader; retry");
        ext_bind_clear(&b);
        decision(s, "bind", "not_leader");
        return 503;
    }
    pthread_mutex_lock(&s->mu);
    if (!(p = smap_get(&s->pods, b.pod_uid)) &&
        (!(p = find_by_name(s, b.pod_namespace, b.pod_name)))) {
        pthread_mutex_unlock(&s->mu);
        *reply = ext_error("pod %s/%s (uid %s) is unknown: the extender has not seen it in "
                           "/filter or /prioritize", b.pod_namespace, b.pod_name, b.pod_uid);
        ext_bind_clear(&b);
        decision(s, "bind", "unknown_pod");
        return 404;
    }
    const struct core_node *node = core_cluster_find(s->c, b.node);
    const struct core_alloc *held = core_alloc_find(s->c, p->uid);
    if (!node) {
        pthread_mutex_unlock(&s->mu);
        *reply = ext_error("node %s is unknown to the extender", b.node);
        ext_bind_clear(&b);
        decision(s, "bind", "unknown_node");
        return 404;
    }
    if (held) {
        int same = strcmp(held->node, b.node) == 0;
        pthread_mutex_unlock(&s->mu);
        if (!same)
            *reply = ext_error("pod %s/%s already holds GPUs on node %s", p->ns, p->name,
                               held->node);
        else
            *reply = json_pack("{s:s}", "Error", "");
        ext_bind_clear(&b);
        decision(s, "bind", same ? "bound" : "conflict");
        return same ? 200 : 409;
    }
    json_t *obj = json_incref(p->obj);
    char uid[64], ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
    snprintf(uid, sizeof uid, "%s", p->uid);
    snprintf(ns, sizeof ns, "%s", p->ns);
    snprintf(name, sizeof name, "%s", p->name);
    /* the lock is for kubelet's Allocate: a Node no kubelet registered (one
     * written through the API alone) never calls it */
    const struct node_info *ni = s->lock ? smap_get(&s->inv, b.node) : NULL;
    if (ni && ni->kubelet) {
        char why[600], who[2 * CORE_NAME_MAX];
        snprintf(who, sizeof who, "%s/%s", ns, name);
        if (ext_nodelock_take(s->lock, b.node, uid, who, wall_now(), why, sizeof why)) {
            pthread_mutex_unlock(&s->mu);
            json_decref(obj);
            *reply = ext_error("%s", why);
            ext_bind_clear(&b);
            decision(s, "bind", "node_busy");
            return EXT_BIND_BUSY;
        }
    }
    if (pod_and_policy(s, obj, &pod, &pol, &err) < 0) {
        if (s->lock)
            ext_nodelock_clear(s->lock, uid);
        pthread_mutex_unlock(&s->mu);
        json_decref(obj);
        *reply = err;
        ext_bind_clear(&b);
        decision(s, "bind", "error");
        return 400;
    }
    json_decref(obj);
    /* the pod's identity in the allocation is the one /bind names */
    snprintf(pod.uid, sizeof pod.uid, "%s", uid);
    rc = core_pick_gpus(s->c, pol, node, &pod, &alloc, &e);
    struct core_status dst;
    if (rc == 0 && !devices_fit(s, node, &pod, &dst))
        rc = gs_errf(&e, GS_ENOFIT, "%s", dst.reason);
    if (rc == 0 && quota_prepare(s, &pod)) {
        struct core_quota_use u[CORE_MAX_GPUS];
        int k = core_quota_use_of_alloc(s->c, &alloc, u);
        if (k > 0 && core_quotas_check(s->quotas, pod.ns, u, k, &e) < 0)
            rc = -GS_ENOFIT;
    }
    if (rc == 0)
        rc = core_reserve(s->c, &alloc, &e);
    if (rc == 0) {
        ann = ext_annot_build(node, &alloc, s->opts.names->annot_prefix, NULL);
        p->unschedulable = 0;
        p->binding = 1;
        set_bind_busy(s, p, 0);
    } else if (s->lock) {
        ext_nodelock_clear(s->lock, uid);
    }
    pthread_mutex_unlock(&s->mu);
    core_pod_clear(&pod);
    if (rc < 0) {
        *reply = ext_error("pod %s/%s does not fit on node %s now: %s", ns, name, b.node, e.msg);
        ext_bind_clear(&b);
        decision(s, "bind", "no_fit");
        return status_for(rc) == 404 ? 404 : 409;
    }
    if (s->commit.bind)
        rc = s->commit.bind(s->commit.ud, ns, name, uid, &alloc, ann, &e);
    pthread_mutex_lock(&s->mu);
    if ((p = smap_get(&s->pods, uid))) {
        p->binding = 0;
        p->bound = rc == 0;
    }
    if (rc < 0) {
        core_unreserve(s->c, uid, NULL);
        if (s->lock)
            ext_nodelock_clear(s->lock, uid);
    }
    pthread_mutex_unlock(&s->mu);
    if (rc < 0) {
        *reply = ext_error("binding pod %s/%s to %s: %s", ns, name, b.node, e.msg);
        json_decref(ann);
        ext_bind_clear(&b);
        decision(s, "bind", "commit_failed");
        return status_for(rc) == 400 ? 500 : status_for(rc);
    }
    json_decref(ann);
    log_info("extender", "bound %s/%s to %s (%d GPU%s)", ns, name, b.node, alloc.n,
             alloc.n == 1 ? "" : "s");
    ext_bind_clear(&b);
    decision(s, "bind", "bound");
    *reply = json_pack("{s:s}", "Error", "");
    return 200;
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
        decision(s, "preempt", "bad_request");
        return 400;
    }
    if (pod_and_policy(s, pa.pod, &pod, &pol, reply) < 0) {
        ext_preempt_clear(&pa);
        decision(s, "preempt", "error");
        return 200;
    }
    json_t *out = json_object();
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < pa.n; i++) {
        struct ext_victims *v = &pa.nodes[i];
        struct core_node *n = core_cluster_find(s->c, v->node);
        struct core_alloc *saved = calloc((size_t)v->n + 1, sizeof *saved);
        int nsaved = 0, ok = 1;
        json_t *pods = json_array();
        if (!n || !saved) {
            free(saved);
            json_decref(pods);
            continue;
        }
        /* take kube-scheduler's victims off first, as it will */
        for (int k = 0; k < v->n; k++) {
            const struct core_alloc *al = core_alloc_find(s->c, v->uids[k]);
            if (al && strcmp(al->node, v->node) == 0) {
                saved[nsaved++] = *al;
                core_unreserve(s->c, v->uids[k], NULL);
            }
            json_array_append_new(pods, json_pack("{s:s}", "UID", v->uids[k]));
        }
        struct core_alloc *more = NULL;
        int nmore = 0;
        if (pod.req.kind != CORE_REQ_NONE && !core_filter(s->c, n, &pod, NULL)) {
            const char *victims[64];
            int nv = 0;
            if (core_preempt(s->c, n, &pod, victims, 64, &nv, &e) == 0 &&
                (more = calloc((size_t)nv + 1, sizeof *more))) {
                for (int k = 0; k < nv; k++) {
                    json_array_append_new(pods, json_pack("{s:s}", "UID", victims[k]));
                    more[nmore++] = *core_alloc_find(s->c, victims[k]);
                }
            } else {
                ok = 0;
            }
        }
        /* kubelet's device count with every victim gone: the core's victims
         * free GPU capacity, which is not always a device (victims are not
         * chosen for devices; such a node is dropped) */
        for (int k = 0; k < nmore; k++)
            core_unreserve(s->c, more[k].pod_uid, NULL);
        if (ok && !devices_fit(s, n, &pod, NULL))
            ok = 0;
        for (int k = 0; k < nmore; k++)
            core_reserve(s->c, &more[k], NULL);
        free(more);
        for (int k = 0; k < nsaved; k++)
            core_reserve(s->c, &saved[k], NULL);
        free(saved);
        if (ok && json_array_size(pods) > 0)
            json_object_set_new(out, v->node, json_pack("{s:o, s:I}", "Pods", pods,
                                                        "NumPDBViolations",
                                                        (json_int_t)v->pdb_violations));
        else
            json_decref(pods);
    }
    pthread_mutex_unlock(&s->mu);
    decision(s, "preempt", json_object_size(out) ? "victims" : "none");
    core_pod_clear(&pod);
    ext_preempt_clear(&pa);
    *reply = json_pack("{s:o}", "NodeNameToMetaVictims", out);
    return 200;
}

/* ---- explanations ---------------------------------------------------------- */

static json_t *gpu_detail(const struct core_node *n)
{
    json_t *gpus = json_array();
    for (int g = 0; g < n->n_gpus; g++) {
        const struct core_gpu *gp = &n->gpus[g];
        json_array_append_new(gpus, json_pack("{s:i, s:s, s:I, s:I, s:i, s:b, s:i}", "index",
                                              gp->index, "model", gp->model, "memory_mib",
                                              (json_int_t)gp->mem_mib, "free_memory_mib",
                                              (json_int_t)gp->free_mem_mib, "free_milli",
                                              gp->free_milli, "healthy", gp->healthy, "pods",
                                              gp->n_pods));
    }
    return gpus;
}

int ext_sched_explain(struct ext_sched *s, const char *ns, const char *name, json_t **reply)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_pod pod;
    const struct core_policy *pol;
    json_t *err = NULL;

    pthread_mutex_lock(&s->mu);
    struct pod *p = find_by_name(s, ns, name);
    if (!p) {
        pthread_mutex_unlock(&s->mu);
        *reply = ext_error("pod %s/%s: the extender has not seen it", ns, name);
        return 404;
    }
    if (pod_and_policy(s, p->obj, &pod, &pol, &err) < 0) {
        pthread_mutex_unlock(&s->mu);
        *reply = err;
        return 200;
    }
    int nn = core_cluster_node_count(s->c), nf = 0;
    struct core_node **fit = calloc((size_t)nn + 1, sizeof *fit);
    int *sc = calloc((size_t)nn + 1, sizeof *sc);
    json_t *nodes = json_array();
    for (int i = 0; i < nn; i++) {
        struct core_node *n = core_cluster_node(s->c, i);
        struct core_status st;
        if (node_fits(s, n, &pod, &st))
            fit[nf++] = n;
        else
            json_array_append_new(nodes, json_pack("{s:s, s:b, s:s, s:s, s:s, s:o}", "node",
                                                   n->name, "fits", 0, "code",
                                                   core_code_name(st.code), "filter",
                                                   st.plugin ? st.plugin : "", "reason",
                                                   st.reason, "gpus", gpu_detail(n)));
    }
    if (nf && core_score(s->c, pol, &pod, fit, nf, sc, &e) == 0)
        for (int i = 0; i < nf; i++)
            json_array_insert_new(nodes, (size_t)i,
                                  json_pack("{s:s, s:b, s:i, s:i, s:o}", "node", fit[i]->name,
                                            "fits", 1, "score", sc[i], "extender_score",
                                            (sc[i] * 10 + 50) / 100, "gpus", gpu_detail(fit[i])));
    const struct core_alloc *al = core_alloc_find(s->c, p->uid);
    json_t *alloc = json_null();
    if (al) {
        const struct core_node *an = core_cluster_find(s->c, al->node);
        alloc = an ? ext_annot_build(an, al, s->opts.names->annot_prefix, "") : json_null();
    }
    json_t *r = json_pack("{s:s, s:s, s:s, s:{s:i, s:i, s:I, s:i, s:s, s:i}, s:o, s:i, s:o}",
                          "pod", name, "namespace", ns, "policy", pol->name, "request", "num_gpu",
                          pod.req.num_gpu, "kind", (int)pod.req.kind, "memory_mib",
                          (json_int_t)pod.req.mem_mib, "milli", pod.req.milli, "mig_profile",
                          pod.req.mig_profile, "mig_count", pod.req.mig_count, "allocation",
                          alloc, "feasible", nf, "nodes", nodes);
    pthread_mutex_unlock(&s->mu);
    free(fit);
    free(sc);
    core_pod_clear(&pod);
    *reply = r;
    return 200;
}

int ext_sched_summary(struct ext_sched *s, const char *ns, const char *name, char *uid,
                      size_t uidcap, char *buf, size_t cap)
{
    struct core_pod pod;
    struct {
        const char *plugin;
        int count;
        char example[300];
    } g[8];
    int ng = 0, total;
    size_t len = 0;

    buf[0] = '\0';
    pthread_mutex_lock(&s->mu);
    struct pod *p = find_by_name(s, ns, name);
    if (!p || core_pod_parse(p->obj, s->opts.names, &pod, NULL) < 0) {
        pthread_mutex_unlock(&s->mu);
        return -GS_ENOENT;
    }
    snprintf(uid, uidcap, "%s", p->uid);
    total = core_cluster_node_count(s->c);
    int quota = quota_prepare(s, &pod);
    for (int i = 0; i < total; i++) {
        struct core_node *n = core_cluster_node(s->c, i);
        struct core_status st;
        struct gs_err qe = GS_ERR_INIT;
        int k;
        if (node_fits(s, n, &pod, &st)) {
            if (!quota || !quota_blocks(s, &pod, n, &qe))
                continue;
            st.plugin = "quota";
            snprintf(st.reason, sizeof st.reason, "%.255s", qe.msg);
        }
        const char *pl = st.plugin ? st.plugin : "filter";
        for (k = 0; k < ng && strcmp(g[k].plugin, pl) != 0; k++)
            ;
        if (k == ng) {
            if (ng == 8)
                continue;
            g[ng].plugin = pl;
            g[ng].count = 0;
            snprintf(g[ng].example, sizeof g[ng].example, "%.60s: %.200s", n->name, st.reason);
            ng++;
        }
        g[k].count++;
    }
    pthread_mutex_unlock(&s->mu);
    core_pod_clear(&pod);
    len += (size_t)snprintf(buf, cap, "0/%d nodes fit the GPU request", total);
    for (int k = 0; k < ng && len < cap; k++)
        len += (size_t)snprintf(buf + len, cap - len, "; %d rejected by %s (e.g. %s)", g[k].count,
                                g[k].plugin, g[k].example);
    return 0;
}

json_t *ext_sched_allocations(struct ext_sched *s)
{
    json_t *out = json_array();
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < core_cluster_alloc_count(s->c); i++) {
        const struct core_alloc *a = core_cluster_alloc(s->c, i);
        const struct core_node *n = core_cluster_find(s->c, a->node);
        const char *slash = strchr(a->pod_name, '/');
        char ns[CORE_NAME_MAX];
        if (!n || !slash)
            continue;
        snprintf(ns, sizeof ns, "%.*s", (int)(slash - a->pod_name), a->pod_name);
        json_array_append_new(out, json_pack("{s:s, s:s, s:s, s:i, s:I, s:I, s:o}", "uid",
                                             a->pod_uid, "ns", ns, "name", slash + 1, "priority",
                                             a->priority, "cpu_milli", (json_int_t)a->cpu_milli,
                                             "mem_bytes", (json_int_t)a->mem_bytes, "annotations",
                                             ext_annot_build(n, a, s->opts.names->annot_prefix,
                                                             NULL)));
    }
    pthread_mutex_unlock(&s->mu);
    return out;
}

/* ---- metrics --------------------------------------------------------------- */

/* One (node, model) row of the GPU gauges. */
struct gpu_row {
    char node[CORE_NAME_MAX], model[CORE_MODEL_MAX];
    double gpus, used, free, mem, milli;
};

static const char *const quota_res[3] = {"gpus", "memory_mib", "milli"};

static void usage_metric(void *ud, const char *ns, const char *model,
                         const struct core_quota_limits *u)
{
    struct ext_sched *s = ud;
    const int64_t v[3] = {u->gpus, u->mem_mib, u->milli};
    for (int i = 0; i < 3; i++)
        metric_set(s->m_ns_usage, (const char *[]){ns, model, quota_res[i]}, (double)v[i]);
}

static void quota_metric(void *ud, const struct core_quota_row *r)
{
    struct ext_sched *s = ud;
    const int64_t l[3] = {r->limit.gpus, r->limit.mem_mib, r->limit.milli};
    const int64_t u[3] = {r->used.gpus, r->used.mem_mib, r->used.milli};
    for (int i = 0; i < 3; i++) {
        if (l[i] == CORE_QUOTA_NONE)
            continue;
        const char *lv[] = {r->ns, r->quota, r->model, quota_res[i]};
        metric_set(s->m_quota_limit, lv, (double)l[i]);
        metric_set(s->m_quota_used, lv, (double)u[i]);
    }
}

void ext_sched_collect(struct ext_sched *s, struct metrics *m)
{
    struct core_stats st;
    struct gpu_row *rows = NULL;
    size_t n = 0, cap = 0;
    (void)m;
    if (!s->m_gpus)
        return;
    /* gather under the scheduler lock, publish after it */
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < core_cluster_node_count(s->c); i++) {
        const struct core_node *nd = core_cluster_node(s->c, i);
        size_t first = n;
        for (int g = 0; g < nd->n_gpus; g++) {
            const struct core_gpu *gp = &nd->gpus[g];
            size_t k = first;
            while (k < n && strcmp(rows[k].model, gp->model) != 0)
                k++;
            if (k == n) {
                if (n == cap) {
                    size_t nc = cap ? cap * 2 : 1024;
                    struct gpu_row *nr = realloc(rows, nc * sizeof *nr);
                    if (!nr)
                        continue;
                    rows = nr;
                    cap = nc;
                }
                memset(&rows[n], 0, sizeof rows[n]);
                snprintf(rows[n].node, sizeof rows[n].node, "%s", nd->name);
                snprintf(rows[n].model, sizeof rows[n].model, "%s", gp->model);
                n++;
            }
            int used = gp->n_pods > 0;
            rows[k].gpus += 1;
            rows[k].used += used;
            rows[k].free += !used && gp->healthy && nd->available;
            rows[k].mem += (double)(gp->mem_mib - gp->free_mem_mib);
            rows[k].milli += CORE_MILLI - gp->free_milli;
        }
    }
    core_cluster_stats(s->c, &st);
    metric_reset(s->m_ns_usage);
    metric_reset(s->m_quota_limit);
    metric_reset(s->m_quota_used);
    core_quotas_recount(s->quotas, s->c, NULL, NULL);
    core_quotas_foreach_usage(s->quotas, usage_metric, s);
    core_quotas_foreach(s->quotas, quota_metric, s);
    pthread_mutex_unlock(&s->mu);
    metric_reset(s->m_gpus);
    metric_reset(s->m_gpus_alloc);
    metric_reset(s->m_gpus_free);
    metric_reset(s->m_mem_alloc);
    metric_reset(s->m_milli_alloc);
    for (size_t k = 0; k < n; k++) {
        const char *lv[] = {rows[k].node, rows[k].model};
        metric_set(s->m_gpus, lv, rows[k].gpus);
        metric_set(s->m_gpus_alloc, lv, rows[k].used);
        metric_set(s->m_gpus_free, lv, rows[k].free);
        metric_set(s->m_mem_alloc, lv, rows[k].mem);
        metric_set(s->m_milli_alloc, lv, rows[k].milli);
    }
    free(rows);
    metric_set(s->m_frag, NULL, st.frag_milli);
    metric_set(s->m_allocs, NULL, st.pods);
}
