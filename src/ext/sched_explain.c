/*
 * ext/sched_explain.c - what the extender says about its state outside the
 * verbs: a pod's explanation (every node's verdict and score), the one-line
 * summary of why it fits nowhere, the allocations, the learned workload,
 * and the GPU and quota gauges collected for /metrics.
 */
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "core/policy.h"
#include "ext/memo.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "ext/sched_int.h"
#include "core/quota.h"
#include "ext/annot.h"

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

/* The node's CPU, memory and pod slots as the filters see them: what the
 * GPU pods placed here and the other pods (ext/sched_usage.c) leave. */
static json_t *host_detail(const struct core_node *n)
{
    return json_pack("{s:I, s:I, s:i, s:i}", "free_cpu_milli", (json_int_t)n->free_cpu_milli,
                     "free_memory_mib", (json_int_t)(n->free_mem_bytes >> 20), "pods", n->n_pods,
                     "other_pods", n->others_pods);
}

/* The GPUs the policy would give the pod on n ("would_get": indices) and,
 * for two or more whole or shared GPUs, the weakest link between them
 * ("weakest_link"): what decides between nodes scored equal
 * (docs/design.md, "Topology"). */
static void would_get(struct core_cluster *c, const struct core_policy *pol,
                      const struct core_node *n, const struct core_pod *pod, json_t *entry)
{
    struct core_alloc a;
    struct gs_err e = GS_ERR_INIT;
    if (!entry || core_pick_gpus(c, pol, n, pod, &a, &e) < 0)
        return;
    json_t *idx = json_array();
    uint32_t set = 0;
    for (int i = 0; i < a.n; i++) {
        json_array_append_new(idx, json_integer(n->gpus[a.gpu[i]].index));
        set |= 1u << a.gpu[i];
    }
    json_object_set_new(entry, "would_get", idx);
    if (a.n > 1 && (pod->req.kind == CORE_REQ_WHOLE || pod->req.kind == CORE_REQ_SHARED))
        json_object_set_new(entry, "weakest_link",
                            json_string(core_link_name(core_topology_quality(n, set) /
                                                       CORE_LINK_SUM_MAX)));
}

int ext_sched_explain(struct ext_sched *s, const char *ns, const char *name, json_t **reply)
{
    struct gs_err e = GS_ERR_INIT;
    struct core_pod pod;
    const struct core_policy *pol;
    json_t *err = NULL;

    pthread_mutex_lock(&s->mu);
    struct pod *p = sched_find_by_name(s, ns, name);
    if (!p) {
        pthread_mutex_unlock(&s->mu);
        *reply = ext_error("pod %s/%s: the extender has not seen it", ns, name);
        return 404;
    }
    if (sched_pod_and_policy(s, p->obj, &pod, &pol, &err) < 0) {
        pthread_mutex_unlock(&s->mu);
        *reply = err;
        return 200;
    }
    int nn = core_cluster_node_count(s->c), nf = 0;
    struct core_node **fit = calloc((size_t)nn + 1, sizeof *fit);
    int *sc = calloc((size_t)nn + 1, sizeof *sc);
    int *at = calloc((size_t)nn + 1, sizeof *at);
    int *soft = calloc((size_t)nn + 1, sizeof *soft), has_soft = 0;
    json_t *r = NULL;
    if (!fit || !sc || !at || !soft) {
        r = ext_error("out of memory");
        goto done;
    }
    json_t *nodes = json_array();
    int held = sched_nominated_prepare(s, &pod);
    for (int i = 0; i < nn; i++) {
        struct core_node *n = core_cluster_node(s->c, i);
        struct core_status st;
        if (sched_node_fits(s, n, &pod, &st) && (!held || sched_nominated_fit(s, &pod, n, &st)))
            fit[nf++] = n;
        else
            json_array_append_new(nodes, json_pack("{s:s, s:b, s:s, s:s, s:s, s:o, s:o}",
                                                   "node", n->name, "fits", 0, "code",
                                                   core_code_name(st.code), "filter",
                                                   st.plugin ? st.plugin : "", "reason",
                                                   st.reason, "gpus", gpu_detail(n), "host",
                                                   host_detail(n)));
    }
    int scored = nf && core_score(s->c, pol, &pod, fit, nf, sc, &e) == 0, best = -1;
    for (int i = 0; i < nf && scored; i++) /* positions, for the policy's choice */
        at[i] = core_node_pos(fit[i]);
    if (scored) {
        best = core_choice_at(s->c, &pod, at, sc, NULL, nf);
        has_soft = core_soft_at(s->c, &pod, at, nf, soft, &e) > 0;
    }
    for (int i = 0; i < nf && scored; i++) {
        json_t *entry = json_pack("{s:s, s:b, s:i, s:i, s:o, s:o}", "node", fit[i]->name,
                                  "fits", 1, "score", sc[i], "extender_score",
                                  sched_extender_score(sc[i], best < 0 ? 0 : sc[best],
                                                       i == best), "gpus",
                                  gpu_detail(fit[i]), "host", host_detail(fit[i]));
        if (has_soft) /* the pod's soft preferences, which come before the score */
            json_object_set_new(entry, "preference", json_integer(soft[i]));
        would_get(s->c, pol, fit[i], &pod, entry);
        json_array_insert_new(nodes, (size_t)i, entry);
    }
    const struct core_alloc *al = core_alloc_find(s->c, p->uid);
    json_t *alloc = json_null();
    if (al) {
        const struct core_node *an = core_cluster_find(s->c, al->node);
        alloc = an ? ext_annot_build(s->c, an, al, s->opts.names->annot_prefix, "") : json_null();
    }
    r = json_pack("{s:s, s:s, s:s, s:{s:i, s:i, s:I, s:i, s:s, s:i}, s:o, s:i, s:o}", "pod",
                  name, "namespace", ns, "policy", pol->name, "request", "num_gpu",
                  pod.req.num_gpu, "kind", (int)pod.req.kind, "memory_mib",
                  (json_int_t)pod.req.mem_mib, "milli", pod.req.milli, "mig_profile",
                  pod.req.mig_profile, "mig_count", pod.req.mig_count, "allocation", alloc,
                  "feasible", nf, "nodes", nodes);
done:
    pthread_mutex_unlock(&s->mu);
    free(fit);
    free(sc);
    free(at);
    free(soft);
    core_pod_clear(&pod);
    *reply = r;
    return fit && sc && at && soft ? 200 : 500;
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
    struct pod *p = sched_find_by_name(s, ns, name);
    if (!p || core_pod_parse(p->obj, s->opts.names, &pod, NULL) < 0) {
        pthread_mutex_unlock(&s->mu);
        return -GS_ENOENT;
    }
    snprintf(uid, uidcap, "%s", p->uid);
    total = core_cluster_node_count(s->c);
    int quota = sched_quota_prepare(s, &pod);
    int held = sched_nominated_prepare(s, &pod);
    for (int i = 0; i < total; i++) {
        struct core_node *n = core_cluster_node(s->c, i);
        struct core_status st;
        struct gs_err qe = GS_ERR_INIT;
        int k;
        if (sched_node_fits(s, n, &pod, &st) && (!held || sched_nominated_fit(s, &pod, n, &st))) {
            if (!quota || !sched_quota_blocks(s, &pod, n, &qe))
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

/* One learned class as /debug/workload shows it, with its models by name
 * (core_models_spec: the same on every replica). */
struct shown_class {
    const struct core_learned *k;
    char *models; /* "A|B", "" = any */
};

static int cmp_shown(const void *a, const void *b)
{
    const struct shown_class *sx = a, *sy = b;
    const struct core_learned *x = sx->k, *y = sy->k;
    if (x->count != y->count)
        return x->count < y->count ? 1 : -1;
    if (x->num_gpu != y->num_gpu)
        return x->num_gpu - y->num_gpu;
    if (x->milli != y->milli)
        return x->milli - y->milli;
    if (x->cpu_milli != y->cpu_milli)
        return x->cpu_milli < y->cpu_milli ? -1 : 1;
    return strcmp(sx->models, sy->models);
}

/* {"pods", "classes"} of the learned classes l[0..n), commonest first;
 * called with the lock held (model names read the cluster). */
static json_t *workload_json(struct ext_sched *s, const struct core_learned *l, int n)
{
    json_t *classes = json_array();
    json_int_t pods = 0;
    struct shown_class *shown = calloc((size_t)n + 1, sizeof *shown);
    int ok = shown != NULL;
    for (int i = 0; ok && i < n; i++) {
        char buf[CORE_MAX_MODELS * CORE_MODEL_MAX];
        shown[i].k = &l[i];
        ok = (shown[i].models = strdup(core_models_spec(s->c, l[i].model_mask, buf,
                                                        sizeof buf))) != NULL;
    }
    if (ok)
        qsort(shown, (size_t)n, sizeof *shown, cmp_shown);
    for (int i = 0; ok && i < n; i++) {
        const struct core_learned *k = shown[i].k;
        json_t *models = json_array();
        for (const char *p = shown[i].models; *p;) {
            size_t len = strcspn(p, "|");
            json_array_append_new(models, json_stringn(p, len));
            p += len + (p[len] == '|');
        }
        json_array_append_new(classes, json_pack("{s:I, s:i, s:i, s:o, s:I}", "cpu_milli",
                                                 (json_int_t)k->cpu_milli, "num_gpu", k->num_gpu,
                                                 "milli", k->milli, "models", models, "pods",
                                                 (json_int_t)k->count));
        pods += k->count;
    }
    for (int i = 0; shown && i < n; i++)
        free(shown[i].models);
    free(shown);
    return json_pack("{s:I, s:o}", "pods", pods, "classes", classes);
}

json_t *ext_sched_workload(struct ext_sched *s)
{
    int n;
    pthread_mutex_lock(&s->mu);
    const struct core_learned *l = core_cluster_learned(s->c, &n);
    json_t *out = workload_json(s, l, n);
    pthread_mutex_unlock(&s->mu);
    return out;
}

json_t *ext_sched_workload_ended(struct ext_sched *s, size_t max_bytes)
{
    struct core_learned *l;
    pthread_mutex_lock(&s->mu);
    int n = core_workload_ended(s->c, &l);
    json_t *out = n < 0 ? NULL : workload_json(s, l, n);
    pthread_mutex_unlock(&s->mu);
    free(l);
    /* over max_bytes: the rarest classes go, an eighth at a time */
    json_t *classes = json_object_get(out, "classes");
    size_t len;
    while (out && (len = json_dumpb(out, NULL, 0, JSON_COMPACT)) > max_bytes) {
        size_t k = json_array_size(classes), keep = k - (k + 7) / 8;
        if (k == 0 || len == 0) {
            json_decref(out);
            return NULL;
        }
        json_int_t pods = json_integer_value(json_object_get(out, "pods"));
        while (json_array_size(classes) > keep) {
            size_t last = json_array_size(classes) - 1;
            pods -= json_integer_value(json_object_get(json_array_get(classes, last), "pods"));
            json_array_remove(classes, last);
        }
        json_object_set_new(out, "pods", json_integer(pods));
    }
    return out;
}

/* Bounds on a saved workload (ext_sched_workload_seed) */
#define WORKLOAD_CLASSES_MAX 4096            /* as many as the core learns */
#define WORKLOAD_CPU_MAX 1000000000000LL     /* milli-CPU: a billion cores */
#define WORKLOAD_PODS_MAX 1000000000000LL

/* Reads classes[i] of a saved workload into *k (models by name, unknown
 * names skipped, as the gpu-models annotation reads). */
static int saved_class(struct ext_sched *s, const json_t *c, size_t i, struct core_learned *k,
                       struct gs_err *e)
{
    static const char *const keys[] = {"cpu_milli", "num_gpu", "milli", "pods"};
    json_int_t v[4];
    for (int f = 0; f < 4; f++) {
        const json_t *x = json_object_get(c, keys[f]);
        if (!json_is_integer(x))
            return gs_errf(e, GS_EINVAL, "classes[%zu].%s: %s", i, keys[f],
                           x ? "not an integer" : "missing");
        v[f] = json_integer_value(x);
    }
    if (v[0] < 0 || v[0] > WORKLOAD_CPU_MAX)
        return gs_errf(e, GS_EINVAL, "classes[%zu].cpu_milli: %lld is outside 0..%lld", i,
                       (long long)v[0], (long long)WORKLOAD_CPU_MAX);
    if (v[1] < 0 || v[1] > CORE_MAX_GPUS)
        return gs_errf(e, GS_EINVAL, "classes[%zu].num_gpu: %lld is outside 0..%d", i,
                       (long long)v[1], CORE_MAX_GPUS);
    if (v[1] > 0 ? v[2] < 1 || v[2] > CORE_MILLI : v[2] != 0)
        return gs_errf(e, GS_EINVAL, "classes[%zu].milli: %lld is outside %s", i,
                       (long long)v[2], v[1] > 0 ? "1..1000" : "0..0 (no GPU)");
    if (v[3] < 1 || v[3] > WORKLOAD_PODS_MAX)
        return gs_errf(e, GS_EINVAL, "classes[%zu].pods: %lld is outside 1..%lld", i,
                       (long long)v[3], (long long)WORKLOAD_PODS_MAX);
    const json_t *models = json_object_get(c, "models"), *m;
    if (!json_is_array(models) || json_array_size(models) > CORE_MAX_MODELS)
        return gs_errf(e, GS_EINVAL, "classes[%zu].models: %s", i,
                       json_is_array(models) ? "too many names" : "not an array of names");
    char spec[CORE_MAX_MODELS * CORE_MODEL_MAX] = "";
    size_t len = 0, j;
    json_array_foreach(models, j, m) {
        const char *name = json_string_value(m);
        if (!name || !*name || strlen(name) >= CORE_MODEL_MAX || strchr(name, '|'))
            return gs_errf(e, GS_EINVAL, "classes[%zu].models[%zu]: not a GPU model name", i,
                           j);
        len += (size_t)snprintf(spec + len, sizeof spec - len, "%s%s", j ? "|" : "", name);
    }
    /* names this replica does not know are skipped; none known (mask 0) is
     * any model once core_workload_seed normalises it */
    *k = (struct core_learned){v[0], (int)v[1], (int)v[2], core_spec_mask(s->c, spec),
                               (long)v[3]};
    return 0;
}

int ext_sched_workload_seed(struct ext_sched *s, const json_t *saved, struct gs_err *e)
{
    const json_t *classes = json_object_get(saved, "classes");
    size_t n = json_array_size(classes), i;
    const json_t *c;
    if (!json_is_object(saved) || !json_is_array(classes))
        return gs_errf(e, GS_EINVAL, "classes: missing or not an array");
    if (n > WORKLOAD_CLASSES_MAX)
        return gs_errf(e, GS_EINVAL, "classes: %zu entries, at most %d", n,
                       WORKLOAD_CLASSES_MAX);
    struct core_learned *l = calloc(n + 1, sizeof *l);
    if (!l)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    int rc = 0;
    pthread_mutex_lock(&s->mu);
    json_array_foreach(classes, i, c) {
        if (!json_is_object(c))
            rc = gs_errf(e, GS_EINVAL, "classes[%zu]: not an object", i);
        else
            rc = saved_class(s, c, i, &l[i], e);
        if (rc < 0)
            break;
    }
    if (rc == 0)
        rc = core_workload_seed(s->c, l, (int)n, e);
    pthread_mutex_unlock(&s->mu);
    free(l);
    return rc;
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
                                             ext_annot_build(s->c, n, a, s->opts.names->annot_prefix,
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
            rows[k].mem += (double)core_gpu_mem_used(gp);
            rows[k].milli += core_gpu_milli_used(gp);
        }
    }
    core_cluster_stats(s->c, &st);
    metric_reset(s->m_ns_usage);
    metric_reset(s->m_quota_limit);
    metric_reset(s->m_quota_used);
    core_quotas_recount(s->quotas, s->c, NULL, NULL);
    core_quotas_foreach_usage(s->quotas, usage_metric, s);
    core_quotas_foreach(s->quotas, quota_metric, s);
    size_t others = s->usage_pods.n;
    size_t nominated = s->nominated.n, owners = s->owners.n;
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
    metric_set(s->m_others, NULL, (double)others);
    metric_set(s->m_nominated, NULL, (double)nominated);
    metric_set(s->m_owners, NULL, (double)owners);
}
