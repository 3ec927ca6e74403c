/* ext/cluster.c - see cluster.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ext/cluster.h"
#include "kube/lease.h"
#include "kube/watch.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/worker.h"

#define MAX_NUDGE 64
#define EVENT_EVERY_S 60.0
#define WORKLOAD_KEY "workload.json"
#define WORKLOAD_MAX_BYTES (768 * 1024) /* a ConfigMap holds 1 MiB */

struct preempt_job {
    struct preempt_job *next;
    struct ext_preemption *pr;
};

struct ext_cluster {
    struct kube_client *kc;
    struct ext_sched *s;
    const struct ext_config *cfg;
    char prefix[128];
    struct kube_watch *nodes, *pods;
    _Atomic(struct kube_watch *) pdbs; /* started by the house thread (pdbs_start) */
    double pdbs_tried;         /* when it last tried (house thread) */
    struct kube_leader *leader;
    struct gs_worker wk;       /* housekeeping: nudges, inventory TTL, events */
    struct gs_worker pw;       /* preemptions chosen by /filter, carried out in turn */
    struct preempt_job *jobs, **jobs_tail; /* under pw.mu */
    atomic_int jobs_ready;
    atomic_int freed;          /* GPUs were freed since the last nudge */
    atomic_int pods_synced, nodes_synced;
    struct metric *m_restarts, *m_relists, *m_rebuilds, *m_leader, *m_nudges, *m_saves;
    atomic_ulong rebuilds;
    int workload_loaded;       /* the saved workload was read (1) or its read refused (2;
                                  house thread) */
    char *workload_saved;      /* what this replica last saved */
    double workload_at;        /* when it last tried */
};

static double now_real(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- watches --------------------------------------------------------------- */

static void nodes_replace(void *ud, const json_t *items, const char *rv)
{
    struct ext_cluster *cl = ud;
    (void)rv;
    int bad = ext_sched_replace_nodes(cl->s, items);
    if (bad)
        log_warn("extender", "%d of %zu nodes could not be read (see above)", bad,
                 json_array_size(items));
    atomic_store(&cl->nodes_synced, 1);
}

static void nodes_event(void *ud, const char *type, const json_t *obj)
{
    struct ext_cluster *cl = ud;
    struct gs_err e = GS_ERR_INIT;
    const char *name = kube_meta_str(obj, "name");
    if (!name)
        return;
    if (strcmp(type, "DELETED") == 0)
        ext_sched_remove_node(cl->s, name, &e);
    else if (ext_sched_upsert_node(cl->s, obj, &e) < 0)
        log_warn("extender", "node %s: %s", name, e.msg);
}

/* ---- the learned workload of pods that have ended --------------------------
 * The learned target workload counts every pod placed, also after it ends; a
 * replica that starts later (a restart, a rolling update) sees only the live
 * pods. The leader saves the ended pods' classes in a ConfigMap and every
 * replica adds them once, when it has listed the nodes and pods (model names
 * map then). The live pods count themselves as they are restored, so no pod
 * counts twice; pods that end between two saves are not carried. A replica
 * saves only after it has read what was saved, so it never overwrites more
 * history with less. */

static void workload_path(const struct ext_cluster *cl, char *buf, size_t cap, int item)
{
    const char *ns = cl->cfg->lease_namespace ? cl->cfg->lease_namespace
                                              : kube_client_namespace(cl->kc);
    snprintf(buf, cap, "/api/v1/namespaces/%s/configmaps%s%s", ns ? ns : "default",
             item ? "/" : "", item ? cl->cfg->workload_configmap : "");
}

/* 0 when done (read, absent or unusable: warned), 1 when refused (RBAC, a
 * 401 that stayed after the token was read again: nothing is saved then,
 * which would replace what could not be read), -1 to try again (the API
 * server did not answer). */
static int workload_load(struct ext_cluster *cl)
{
    char path[600];
    json_t *cm = NULL, *saved = NULL;
    json_error_t je;
    struct gs_err e = GS_ERR_INIT;
    workload_path(cl, path, sizeof path, 1);
    int rc = kube_get(cl->kc, path, &cm, &e);
    const char *text = json_string_value(
        json_object_get(json_object_get(cm, "data"), WORKLOAD_KEY));
    if (rc == -GS_ENOENT)
        log_info("extender", "no saved workload (%s): learning from the live pods", path);
    else if (rc == -GS_EUNAVAIL)
        log_warn("extender", "reading the saved workload: %s; trying again", e.msg);
    else if (rc < 0) /* refused (RBAC): saying it every 5 s would help no one */
        log_warn("extender", "reading the saved workload: %s; learning from the live pods, "
                 "and not saving (that would replace what could not be read)", e.msg);
    else if (!text)
        log_warn("extender", "%s: no data.%s; learning from the live pods", path, WORKLOAD_KEY);
    else if (strlen(text) > WORKLOAD_MAX_BYTES)
        log_warn("extender", "%s: data.%s: %zu bytes, at most %d; not used", path, WORKLOAD_KEY,
                 strlen(text), WORKLOAD_MAX_BYTES);
    else if (!(saved = json_loads(text, JSON_REJECT_DUPLICATES, &je)))
        log_warn("extender", "%s: data.%s: line %d: %s; not used", path, WORKLOAD_KEY, je.line,
                 je.text);
    else if (ext_sched_workload_seed(cl->s, saved, &e) < 0)
        log_warn("extender", "%s: data.%s: %s; not used", path, WORKLOAD_KEY, e.msg);
    else
        log_info("extender", "learned workload: %lld pods that have ended, from %s",
                 (long long)json_integer_value(json_object_get(saved, "pods")), path);
    json_decref(saved);
    json_decref(cm);
    return rc == -GS_EUNAVAIL ? -1 : rc < 0 && rc != -GS_ENOENT ? 1 : 0;
}

/* Saves the ended pods' classes when they changed since the last save. */
static void workload_save(struct ext_cluster *cl)
{
    char path[600];
    struct gs_err e = GS_ERR_INIT;
    json_t *w = ext_sched_workload_ended(cl->s, WORKLOAD_MAX_BYTES);
    char *text = w ? json_dumps(w, JSON_COMPACT) : NULL;
    json_decref(w);
    if (!text || (cl->workload_saved && strcmp(text, cl->workload_saved) == 0)) {
        free(text);
        return;
    }
    workload_path(cl, path, sizeof path, 1);
    json_t *cm = json_pack("{s:s, s:s, s:{s:s}, s:{s:s}}", "apiVersion", "v1", "kind",
                           "ConfigMap", "metadata", "name", cl->cfg->workload_configmap, "data",
                           WORKLOAD_KEY, text);
    int rc = kube_replace(cl->kc, path, cm, NULL, &e);
    if (rc == -GS_ENOENT) {
        e = (struct gs_err)GS_ERR_INIT;
        workload_path(cl, path, sizeof path, 0);
        rc = kube_create(cl->kc, path, cm, NULL, &e);
    }
    json_decref(cm);
    metric_inc(cl->m_saves, (const char *[]){rc < 0 ? "error" : "ok"});
    if (rc < 0) {
        log_warn("extender", "saving the learned workload: %s", e.msg);
        free(text);
        return;
    }
    free(cl->workload_saved);
    cl->workload_saved = text;
}

/* A pod's "namespace/name" key split into ns and name (each at least
 * CORE_NAME_MAX), and its API path into path (NULL: not wanted), with
 * "/sub" when sub is not NULL. -1 when the key has no namespace. */
static int pod_ref(const char *key, const char *sub, char *ns, char *name, char *path,
                   size_t cap)
{
    const char *slash = strchr(key, '/');
    if (!slash)
        return -1;
    snprintf(ns, CORE_NAME_MAX, "%.*s", (int)(slash - key), key);
    snprintf(name, CORE_NAME_MAX, "%s", slash + 1);
    if (path)
        snprintf(path, cap, "/api/v1/namespaces/%s/pods/%s%s%s", ns, name, sub ? "/" : "",
                 sub ? sub : "");
    return 0;
}

/* How many pods a relist kept without listing them are looked up after it. */
#define UNLISTED_MAX 64

/* GPUs or a node were freed: a nudge round begins (ext_sched_nudge_round),
 * which the housekeeping thread carries out within a second. */
static void freed_now(struct ext_cluster *cl)
{
    ext_sched_nudge_round(cl->s);
    atomic_store(&cl->freed, 1);
}

/* Looks up the pods the relist just made kept without listing them (this
 * replica bound them after the list began): one deleted before the list's
 * snapshot gets no DELETED from the watch that follows, and would hold its
 * GPUs until the next relist. Not found, or a pod of another UID by the
 * name: freed. An answer that does not come keeps it, and the others too
 * (the watch, which waits, must not wait 10 s a pod). Watch thread, before
 * the watch starts: a deletion after this GET comes with the watch. */
static void check_unlisted(struct ext_cluster *cl)
{
    char *keys[UNLISTED_MAX], path[700], ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
    int n = ext_sched_unlisted(cl->s, keys, UNLISTED_MAX);
    for (int i = 0; i < n; i++) {
        char *uid = strrchr(keys[i], '/');
        struct gs_err e = GS_ERR_INIT;
        json_t *pod = NULL;
        *uid++ = '\0';
        pod_ref(keys[i], NULL, ns, name, path, sizeof path);
        int rc = kube_get(cl->kc, path, &pod, &e);
        const char *u = rc == 0 ? kube_meta_str(pod, "uid") : NULL;
        if (rc == -GS_ENOENT || (rc == 0 && (!u || strcmp(u, uid) != 0))) {
            if (ext_sched_unlisted_gone(cl->s, uid)) {
                log_info("extender", "pod %s was deleted while the pods were listed: its "
                         "GPUs are free", keys[i]);
                freed_now(cl);
            }
        } else if (rc < 0) {
            log_warn("extender", "looking up pod %s, bound while the pods were listed: %s; "
                     "it keeps its GPUs until its deletion or the next list", keys[i], e.msg);
        }
        json_decref(pod);
        free(keys[i]);
        if (rc == -GS_EUNAVAIL) { /* the API server does not answer: the watch waits */
            while (++i < n)
                free(keys[i]);
        }
    }
}

static void pods_replace(void *ud, const json_t *items, const char *rv)
{
    struct ext_cluster *cl = ud;
    (void)rv;
    ext_sched_replace_pods(cl->s, items);
    check_unlisted(cl);
    atomic_fetch_add(&cl->rebuilds, 1);
    atomic_store(&cl->pods_synced, 1);
    freed_now(cl); /* GPUs may have been freed while we were away */
}

static void pods_list_begin(void *ud)
{
    struct ext_cluster *cl = ud;
    ext_sched_list_begin(cl->s);
}

static void pods_event(void *ud, const char *type, const json_t *obj)
{
    struct ext_cluster *cl = ud;
    if (ext_sched_observe_pod(cl->s, obj, strcmp(type, "DELETED") == 0)) { /* its round begun */
        atomic_store(&cl->freed, 1);
        gs_worker_wake(&cl->wk);
    }
}

static void pdbs_replace(void *ud, const json_t *items, const char *rv)
{
    struct ext_cluster *cl = ud;
    (void)rv;
    int bad = ext_sched_replace_pdbs(cl->s, items);
    if (bad)
        log_warn("extender", "%d of %zu PodDisruptionBudgets could not be read (see above): "
                 "they protect no pod", bad, json_array_size(items));
}

static void pdbs_event(void *ud, const char *type, const json_t *obj)
{
    struct ext_cluster *cl = ud;
    struct gs_err e = GS_ERR_INIT;
    if (strcmp(type, "DELETED") == 0)
        ext_sched_remove_pdb(cl->s, kube_meta_str(obj, "namespace"), kube_meta_str(obj, "name"));
    else if (ext_sched_upsert_pdb(cl->s, obj, &e) < 0)
        log_warn("extender", "%s: it protects no pod", e.msg);
}

/* Starts the PodDisruptionBudgets' watch once API discovery says which
 * version the API server serves: policy/v1 from Kubernetes 1.21,
 * policy/v1beta1 before (and until 1.25). Until then (the API server did
 * not answer; tried again every 5 s) no preemption from /filter is made
 * (ext_sched_pdbs_pending). House thread. */
static void pdbs_start(struct ext_cluster *cl)
{
    static const struct kube_watch_ops ops = {pdbs_replace, pdbs_event, NULL, NULL};
    struct gs_err e = GS_ERR_INIT;
    struct kube_watch *w = NULL;
    json_t *got = NULL;
    if (atomic_load(&cl->pdbs) || now_real() - cl->pdbs_tried < 5.0)
        return;
    cl->pdbs_tried = now_real();
    int rc = kube_get(cl->kc, "/apis/policy/v1", &got, &e);
    json_decref(got);
    if (rc < 0 && rc != -GS_ENOENT) {
        log_warn("extender", "API discovery of policy/v1 (PodDisruptionBudgets): %s; trying "
                 "again", e.msg);
        return;
    }
    const char *path = rc == 0 ? "/apis/policy/v1/poddisruptionbudgets"
                               : "/apis/policy/v1beta1/poddisruptionbudgets";
    if (kube_watch_start(cl->kc, &(struct kube_watch_opts){.path = path}, &ops, cl, &w, &e) < 0)
        log_warn("extender", "watching %s: %s; trying again", path, e.msg);
    else
        atomic_store(&cl->pdbs, w);
}

int ext_cluster_ready(void *ud)
{
    struct ext_cluster *cl = ud;
    /* a replica that has not read the GPUQuotas yet would place past them */
    return atomic_load(&cl->nodes_synced) && atomic_load(&cl->pods_synced) &&
           ext_sched_quotas_known(cl->s);
}

/* ---- the commit backend ---------------------------------------------------- */

/* After a Binding that did not answer 201: where the pod is bound, if
 * anywhere. A 409 (a retried bind) or an answer that never came (a
 * timeout, a 5xx) says nothing of whether the Binding exists; the pod
 * does. 1 bound to node, 2 bound to another node, 0 not bound, 3 another
 * pod of that name now (its UID is not uid: recreated), or -GS_E* when the
 * pod could not be read. Its resourceVersion goes in rv, and *ours says
 * whether its annotations are still the ones this bind wrote (another
 * bind, by another leader, may have written its own since). */
static int bound_after_all(struct ext_cluster *cl, const char *path, const char *uid,
                           const char *node, const json_t *annotations, char *rv, size_t cap,
                           int *ours)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *pod = NULL;
    int rc = kube_get(cl->kc, path, &pod, &e);
    *ours = 0;
    if (rc == 0) {
        json_t *meta = json_object_get(pod, "metadata");
        json_t *have = json_object_get(meta, "annotations");
        const char *nn =
            json_string_value(json_object_get(json_object_get(pod, "spec"), "nodeName"));
        const char *v = json_string_value(json_object_get(meta, "resourceVersion"));
        const char *u = json_string_value(json_object_get(meta, "uid"));
        const char *k;
        json_t *want;
        snprintf(rv, cap, "%s", v ? v : "");
        *ours = 1;
        json_object_foreach((json_t *)annotations, k, want) *ours &=
            json_equal(json_object_get(have, k), want);
        rc = u && *uid && strcmp(u, uid) != 0 ? 3
             : !nn || !*nn                    ? 0
             : strcmp(nn, node) == 0          ? 1
                                              : 2;
    }
    json_decref(pod);
    return rc;
}

static int may_bind(void *ud)
{
    struct ext_cluster *cl = ud;
    return !cl->leader || kube_leader_is_leader(cl->leader);
}

/* Whether binds and preemptions may act here: leading, and knowing the
 * cluster. A leader restarted in place renews its lease at once, before
 * its pod list is in: every GPU would look free. */
static int may_act(void *ud)
{
    return may_bind(ud) && ext_cluster_ready(ud);
}

static int commit_bind(void *ud, const char *ns, const char *name, const char *uid,
                       const struct core_alloc *a, const json_t *annotations, struct gs_err *e)
{
    struct ext_cluster *cl = ud;
    char path[700], bpath[720], rv[64];
    json_t *patch, *binding;
    int rc;

    snprintf(path, sizeof path, "/api/v1/namespaces/%s/pods/%s", ns, name);
    /* the UID makes the patch fail on a pod re-created under the name
     * meanwhile (uid is immutable), which must not get this assignment */
    json_t *ann = json_copy((json_t *)annotations);
    char done[160];
    /* a device plugin's mark copied with the pod (kubectl debug --copy-to,
     * a saved manifest): it would take this pod as served, and Allocate
     * would find no pod for it (the pod failed admission) */
    snprintf(done, sizeof done, "%sallocated-at", cl->prefix);
    if (ann)
        json_object_set_new(ann, done, json_null());
    patch = !ann        ? NULL
            : uid && *uid ? json_pack("{s:{s:s, s:o}}", "metadata", "uid", uid, "annotations", ann)
                          : json_pack("{s:{s:o}}", "metadata", "annotations", ann);
    if (!patch)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    rc = kube_patch(cl->kc, path, KUBE_PATCH_STRATEGIC, patch, NULL, e);
    json_decref(patch);
    if (rc < 0) {
        gs_err_prefix(e, "writing the assignment annotations");
        return rc;
    }
    if (!may_bind(cl)) {
        /* the patch took long enough for the lease to run out: another
         * replica may bind now, so this one must not (its patch is taken
         * back below) */
        rc = gs_errf(e, GS_EUNAVAIL, "this replica stopped leading while it bound; not creating "
                     "the Binding");
    } else {
        binding = json_pack("{s:s, s:s, s:{s:s, s:s, s:s}, s:{s:s, s:s, s:s}}", "apiVersion",
                            "v1", "kind", "Binding", "metadata", "name", name, "namespace", ns,
                            "uid", uid, "target", "apiVersion", "v1", "kind", "Node", "name",
                            a->node);
        snprintf(bpath, sizeof bpath, "%s/binding", path);
        rc = kube_create(cl->kc, bpath, binding, NULL, e);
        json_decref(binding);
        if (rc == 0)
            return 0;
        gs_err_prefix(e, "creating the Binding");
    }
    for (int tries = 0;; tries++) {
        int ours, where = bound_after_all(cl, path, uid, a->node, annotations, rv, sizeof rv,
                                          &ours);
        if (where == 1) {
            log_info("extender", "pod %s/%s: %s; the pod is bound to %s all the same", ns, name,
                     e->msg, a->node);
            return 0;
        }
        if (where == -GS_ENOENT) { /* deleted: nothing to bind, nothing to hold */
            log_info("extender", "pod %s/%s: %s; the pod is gone", ns, name, e->msg);
            return rc;
        }
        if (where < 0) {
            log_warn("extender", "pod %s/%s: %s, and the pod cannot be read: its GPUs stay "
                     "reserved until it is seen bound or scheduled again", ns, name, e->msg);
            gs_err_prefix(e, "whether the pod is bound is unknown");
            return EXT_COMMIT_UNKNOWN;
        }
        if (where == 3 || !ours) { /* not this bind's to take back */
            log_info("extender", "pod %s/%s: %s; %s, left as it is", ns, name, e->msg,
                     where == 3 ? "the pod was replaced (another UID)"
                                : "its assignment is another bind's now");
            return rc;
        }
        if (tries == 2) { /* changed under each undo: read, not bound, left as it is */
            log_warn("extender", "pod %s/%s: the assignment annotations stay after a failed "
                     "bind (the pod kept changing)", ns, name);
            return rc;
        }
        /* take the assignment back, unless the pod changed since it was
         * read (its Binding may have landed meanwhile: read it again) */
        struct gs_err e2 = GS_ERR_INIT;
        json_t *nulls = json_object();
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)annotations, k, v) json_object_set_new(nulls, k, json_null());
        json_t *undo = json_pack("{s:{s:o}}", "metadata", "annotations", nulls);
        if (*rv)
            json_object_set_new(json_object_get(undo, "metadata"), "resourceVersion",
                                json_string(rv));
        int u = kube_patch(cl->kc, path, KUBE_PATCH_MERGE, undo, NULL, &e2);
        json_decref(undo);
        if (u == -GS_ECONFLICT)
            continue;
        if (u < 0)
            log_warn("extender", "pod %s/%s: removing the assignment after a failed bind: %s", ns,
                     name, e2.msg);
        return rc;
    }
}

/* The preemption a /filter chose (ext/sched_preempt.c), carried out as
 * kube-scheduler's own: each victim deleted, only while it is still the pod
 * chosen (its UID a precondition), with a Preempted event; then the
 * preemptor nominated to the node, which kube-scheduler's filters read (it
 * keeps the node's CPU and memory for it) and the extender's watch too. A
 * victim already gone, or replaced by a pod of the same name, counts as
 * deleted. */
static int commit_preempt(void *ud, struct ext_preemption *pr, struct gs_err *e)
{
    struct ext_cluster *cl = ud;
    char path[700], msg[1024], ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
    int deleted = 0, failed = 0;
    for (int i = 0; i < pr->n; i++) {
        struct gs_err de = GS_ERR_INIT;
        long status = 0;
        if (pod_ref(pr->v[i].pod, NULL, ns, name, path, sizeof path) < 0)
            return gs_errf(e, GS_EINVAL, "victim %s: no namespace", pr->v[i].pod);
        json_t *opts = json_pack("{s:s, s:s, s:{s:s}}", "kind", "DeleteOptions", "apiVersion",
                                 "v1", "preconditions", "uid", pr->v[i].uid);
        /* a stop waits for one delete at most, not one per victim; and
         * a replica that no longer leads deletes nothing more */
        int rc = gs_worker_stopping(&cl->pw)
                     ? gs_errf(&de, GS_EUNAVAIL, "the extender is stopping")
                 : !may_act(cl)
                     ? gs_errf(&de, GS_EUNAVAIL, "this replica no longer leads")
                     : kube_request(cl->kc, "DELETE", path, "application/json", opts, NULL,
                                    &status, &de);
        json_decref(opts);
        if (rc < 0 && status != 404 && status != 409) {
            /* the first one: nothing done, the preemption is forgotten; a
             * later one: the others are going, the node stays the pod's
             * (until the preemption's deadline, if this one stays) */
            if (!deleted)
                return gs_errf(e, -rc, "deleting victim %s: %s", pr->v[i].pod, de.msg);
            log_warn("extender", "preempting for %s: deleting victim %s: %s", pr->pod,
                     pr->v[i].pod, de.msg);
            pr->v[i].failed = 1; /* not waited for */
            failed++;
            continue;
        }
        deleted++;
        if (rc < 0)
            continue;
        snprintf(msg, sizeof msg, "Preempted by %s on node %s", pr->pod, pr->node);
        if (cl->cfg->events &&
            kube_event(cl->kc, "Pod", ns, name, pr->v[i].uid, "Normal", "Preempted", msg,
                       &de) < 0)
            log_warn("extender", "event for %s: %s", pr->v[i].pod, de.msg);
    }
    if (pod_ref(pr->pod, "status", ns, name, path, sizeof path) < 0)
        return gs_errf(e, GS_EINVAL, "pod %s: no namespace", pr->pod);
    json_t *patch = json_pack("{s:{s:s}}", "status", "nominatedNodeName", pr->node);
    struct gs_err pe = GS_ERR_INIT;
    /* the victims are going: a pod that cannot be nominated (no RBAC for
     * pods/status, say) still has the node kept by the extender; one that
     * stops or no longer leads writes nothing more */
    if (gs_worker_stopping(&cl->pw) || !may_act(cl))
        log_warn("extender", "nominating %s to %s: not done, stopping or no longer leading",
                 pr->pod, pr->node);
    else if (kube_patch(cl->kc, path, KUBE_PATCH_MERGE, patch, NULL, &pe) < 0)
        log_warn("extender", "nominating %s to %s: %s", pr->pod, pr->node, pe.msg);
    json_decref(patch);
    size_t o = (size_t)snprintf(msg, sizeof msg, "preempted %d pod%s on %s for %s (priority %d):",
                                pr->n - failed, pr->n - failed == 1 ? "" : "s", pr->node,
                                pr->pod, (int)pr->priority);
    for (int i = 0, k = 0; i < pr->n && o < sizeof msg; i++)
        if (!pr->v[i].failed)
            o += (size_t)snprintf(msg + o, sizeof msg - o, "%s %s (priority %d)", k++ ? "," : "",
                                  pr->v[i].pod, (int)pr->v[i].priority);
    log_info("extender", "%s", msg);
    return 0;
}

/* commit.later: the preemption goes to the pw thread, in the order chosen. */
static int preempt_later(void *ud, struct ext_preemption *pr)
{
    struct ext_cluster *cl = ud;
    struct preempt_job *j = malloc(sizeof *j);
    if (!j)
        return -1;
    *j = (struct preempt_job){NULL, pr};
    pthread_mutex_lock(&cl->pw.mu);
    int stopping = gs_worker_stopping(&cl->pw);
    if (!stopping) {
        *cl->jobs_tail = j;
        cl->jobs_tail = &j->next;
        atomic_store(&cl->jobs_ready, 1);
        pthread_cond_broadcast(&cl->pw.cv);
    }
    pthread_mutex_unlock(&cl->pw.mu);
    if (stopping)
        free(j);
    return stopping ? -1 : 0;
}

/* Takes the oldest job off the queue, or NULL. */
static struct preempt_job *job_take(struct ext_cluster *cl)
{
    pthread_mutex_lock(&cl->pw.mu);
    struct preempt_job *j = cl->jobs;
    if (j && !(cl->jobs = j->next))
        cl->jobs_tail = &cl->jobs;
    atomic_store(&cl->jobs_ready, cl->jobs != NULL);
    pthread_mutex_unlock(&cl->pw.mu);
    return j;
}

static void *preempt_main(void *arg)
{
    struct ext_cluster *cl = arg;
    while (!gs_worker_sleep(&cl->pw, 3600, &cl->jobs_ready)) {
        struct preempt_job *j = job_take(cl);
        if (j)
            ext_sched_carry_out(cl->s, j->pr);
        free(j);
    }
    return NULL;
}

/* At a stop: what was not carried out is dropped (the process ends; the
 * victims stay). */
static void preempt_stop(struct ext_cluster *cl)
{
    gs_worker_stop(&cl->pw);
    for (struct preempt_job *j; (j = job_take(cl));) {
        log_warn("extender", "preempting for %s on %s: not carried out, stopping", j->pr->pod,
                 j->pr->node);
        free(j->pr);
        free(j);
    }
    gs_worker_destroy(&cl->pw);
}

int ext_cluster_leader(void *cluster, char *out, size_t cap)
{
    struct ext_cluster *cl = cluster;
    if (!cl->leader || kube_leader_is_leader(cl->leader))
        return 0;
    kube_leader_holder(cl->leader, out, cap);
    return *out != 0;
}

/* ---- housekeeping: stale inventories, nudges, events, metrics --------------- */

/* Nudges every pending GPU pod (all: a replica that starts leading), or
 * those ext_sched_to_nudge lists, list after list while it says more wait:
 * at most NUDGE_LISTS lists now, the rest at the next call (a second
 * later). A failed patch is tried again at the next call (the API server
 * may be away: said once per call). */
#define NUDGE_LISTS 8
static void nudge(struct ext_cluster *cl, int all)
{
    char *pods[MAX_NUDGE], now[40], key[160];
    int more = 0, done = 0, failed = 0;
    snprintf(key, sizeof key, "%sretry-at", cl->prefix);
    for (int k = 0; k < NUDGE_LISTS && !failed && (k == 0 || more); k++) {
        int n = all ? ext_sched_waiting(cl->s, pods, MAX_NUDGE)
                    : ext_sched_to_nudge(cl->s, pods, MAX_NUDGE, gs_mono_s(), &more);
        kube_now_micro(now, sizeof now);
        int away = 0; /* the API server did not answer: the rest wait for the next call */
        for (int i = 0; i < n; i++) {
            struct gs_err e = GS_ERR_INIT;
            char path[700], ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
            json_t *patch = json_pack("{s:{s:{s:s}}}", "metadata", "annotations", key, now);
            int rc = away                                                 ? -GS_EUNAVAIL
                     : pod_ref(pods[i], NULL, ns, name, path, sizeof path) < 0
                         ? gs_errf(&e, GS_EINVAL, "no namespace")
                         : kube_patch(cl->kc, path, KUBE_PATCH_MERGE, patch, NULL, &e);
            if (rc < 0 && rc != -GS_ENOENT) { /* gone: nothing to nudge */
                if (!failed++)
                    log_warn("extender", "nudging %s: %s", pods[i], e.msg);
                away |= rc == -GS_EUNAVAIL;
                if (!all)
                    ext_sched_nudge_failed(cl->s, pods[i]);
            } else if (rc == 0) {
                metric_inc(cl->m_nudges, NULL);
                done++;
            }
            json_decref(patch);
            free(pods[i]);
        }
        if (all || n == 0)
            break;
    }
    if (done)
        log_info("extender", "%s: nudged %d pending GPU pod%s", all ? "now leading" : "GPUs or a node freed",
                 done, done == 1 ? "" : "s");
    if (failed > 1)
        log_warn("extender", "nudging: %d more failed; tried again in a second", failed - 1);
}

/* A GPUUnschedulable Event for each pod whose /filter found no node, at
 * most one a minute per pod (the time is kept with the pod). */
static void post_events(struct ext_cluster *cl)
{
    char *pods[MAX_NUDGE];
    int n = ext_sched_unschedulable_due(cl->s, pods, MAX_NUDGE, now_real(), EVENT_EVERY_S);
    for (int i = 0; i < n; i++) {
        char summary[1024], uid[64], ns[CORE_NAME_MAX], name[CORE_NAME_MAX];
        struct gs_err e = GS_ERR_INIT;
        if (pod_ref(pods[i], NULL, ns, name, NULL, 0) == 0 &&
            ext_sched_summary(cl->s, ns, name, uid, sizeof uid, summary, sizeof summary) == 0 &&
            kube_event(cl->kc, "Pod", ns, name, uid, "Warning", "GPUUnschedulable", summary,
                       &e) < 0)
            log_warn("extender", "event for %s: %s", pods[i], e.msg);
        free(pods[i]);
    }
}

void ext_cluster_collect(struct ext_cluster *cl)
{
    struct kube_watch_stats a = {0}, b = {0};
    kube_watch_get_stats(cl->nodes, &a);
    kube_watch_get_stats(cl->pods, &b);
    metric_set(cl->m_restarts, (const char *[]){"nodes"}, (double)a.restarts);
    metric_set(cl->m_restarts, (const char *[]){"pods"}, (double)b.restarts);
    metric_set(cl->m_relists, (const char *[]){"nodes"}, (double)a.lists);
    metric_set(cl->m_relists, (const char *[]){"pods"}, (double)b.lists);
    struct kube_watch *pw = atomic_load(&cl->pdbs);
    if (pw) {
        struct kube_watch_stats d = {0};
        kube_watch_get_stats(pw, &d);
        metric_set(cl->m_restarts, (const char *[]){"poddisruptionbudgets"}, (double)d.restarts);
        metric_set(cl->m_relists, (const char *[]){"poddisruptionbudgets"}, (double)d.lists);
    }
    metric_set(cl->m_rebuilds, NULL, (double)atomic_load(&cl->rebuilds));
    metric_set(cl->m_leader, NULL, may_bind(cl));
}

static void *house_main(void *arg)
{
    struct ext_cluster *cl = arg;
    double last_inv = 0;
    /* a replica that starts leading, at its start too, nudges every pending
     * GPU pod once it knows them: binds refused or cut off while no replica
     * led (or this one was restarting) left them in kube-scheduler's
     * unschedulable queue */
    int led = 0;
    pdbs_start(cl);
    while (!gs_worker_sleep(&cl->wk, 1.0, &cl->freed)) {
        pdbs_start(cl);
        int leading = may_bind(cl) && ext_cluster_ready(cl);
        /* a replica that does not lead nudges too: the pods it refused
         * itself, when the leader did not answer a forwarded /filter, are
         * marked here only */
        /* freed only wakes this thread: the round began with the free, and
         * its pods stay due until a ready replica has nudged them */
        atomic_store(&cl->freed, 0);
        if (leading && !led && cl->cfg->nudge)
            nudge(cl, 1);
        else if (cl->cfg->nudge && ext_cluster_ready(cl)) /* a round's, binds refused */
            nudge(cl, 0);
        led = leading;
        if (cl->cfg->workload_configmap && cl->cfg->workload_configmap[0] &&
            ext_cluster_ready(cl)) {
            if (!cl->workload_loaded && now_real() - cl->workload_at >= 5.0) {
                cl->workload_at = now_real();
                int rc = workload_load(cl);
                cl->workload_loaded = rc < 0 ? 0 : rc == 0 ? 1 : 2;
            } else if (cl->workload_loaded == 1 && leading &&
                       now_real() - cl->workload_at >= cl->cfg->workload_save) {
                cl->workload_at = now_real();
                workload_save(cl);
            }
        }
        if (now_real() - last_inv >= 1.0) {
            last_inv = now_real();
            if (ext_sched_expire_preemptions(cl->s, last_inv) > 0)
                freed_now(cl); /* the pods they kept off: nudged next */
            ext_sched_check_inventory(cl->s, last_inv, cl->cfg->inventory_ttl);
            if (cl->cfg->events && leading)
                post_events(cl);
        }
    }
    return NULL;
}

int ext_cluster_start(struct kube_client *kc, struct ext_sched *s, const struct ext_config *cfg,
                      struct metrics *m, struct ext_cluster **out, struct gs_err *e)
{
    struct ext_cluster *cl = calloc(1, sizeof *cl);
    static const struct kube_watch_ops node_ops = {nodes_replace, nodes_event, NULL, NULL};
    static const struct kube_watch_ops pod_ops = {pods_replace, pods_event, pods_list_begin, NULL};
    int rc;

    if (!cl)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    cl->kc = kc;
    cl->s = s;
    cl->cfg = cfg;
    snprintf(cl->prefix, sizeof cl->prefix, "%s", cfg->names.annot_prefix);
    cl->m_restarts = metrics_add(m, METRIC_COUNTER, "gpusched_extender_watch_restarts_total",
                                 "Watch streams re-opened, by resource.", "resource", NULL, 0, e);
    cl->m_relists = metrics_add(m, METRIC_COUNTER, "gpusched_extender_lists_total",
                                "Full lists (start and after 410 Gone), by resource.", "resource",
                                NULL, 0, e);
    cl->m_rebuilds = metrics_add(m, METRIC_COUNTER, "gpusched_extender_rebuilds_total",
                                 "Allocation state rebuilds from pod annotations.", NULL, NULL, 0,
                                 e);
    cl->m_leader = metrics_add(m, METRIC_GAUGE, "gpusched_extender_leader",
                               "1 when this replica may bind (leader, or no election).", NULL,
                               NULL, 0, e);
    cl->m_nudges = metrics_add(m, METRIC_COUNTER, "gpusched_extender_nudges_total",
                               "Pending GPU pods nudged (touched) after GPUs or a node freed "
                               "up, or after a refused /bind.", NULL, NULL, 0, e);
    cl->m_saves = metrics_add(m, METRIC_COUNTER, "gpusched_extender_workload_saves_total",
                              "Saves of the workload learned from ended pods (the leader, when "
                              "it changed), by result (ok, error).", "result", NULL, 0, e);
    if (!cl->m_restarts || !cl->m_relists || !cl->m_rebuilds || !cl->m_leader || !cl->m_nudges ||
        !cl->m_saves) {
        free(cl);
        return -GS_EINVAL;
    }
    if (cfg->leader_elect) {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        struct kube_leader_opts lo = {.ns = cfg->lease_namespace, .name = cfg->lease_name,
                                      .identity = cfg->identity ? cfg->identity : host,
                                      .lease_s = cfg->lease_duration};
        if ((rc = kube_leader_start(kc, &lo, &cl->leader, e)) < 0) {
            free(cl);
            return rc;
        }
    }
    cl->jobs_tail = &cl->jobs;
    if (gs_worker_start(&cl->pw, preempt_main, cl) < 0) {
        kube_leader_stop(cl->leader);
        free(cl);
        return gs_errf(e, GS_ENOMEM, "cannot start a thread");
    }
    ext_sched_set_commit(s, &(struct ext_commit){.bind = commit_bind, .may_bind = may_act,
                                                  .preempt = commit_preempt,
                                                  .later = preempt_later, .ud = cl});
    ext_sched_pdbs_pending(s); /* until pdbs_start's watch has listed them */
    if ((rc = kube_watch_start(kc, &(struct kube_watch_opts){.path = "/api/v1/nodes"}, &node_ops,
                               cl, &cl->nodes, e)) < 0 ||
        (rc = kube_watch_start(kc, &(struct kube_watch_opts){.path = "/api/v1/pods"}, &pod_ops,
                               cl, &cl->pods, e)) < 0 ||
        gs_worker_start(&cl->wk, house_main, cl) < 0) {
        kube_watch_stop(cl->nodes);
        kube_watch_stop(cl->pods);
        kube_leader_stop(cl->leader);
        ext_sched_set_commit(s, &(struct ext_commit){0});
        preempt_stop(cl);
        free(cl);
        return rc < 0 ? rc : gs_errf(e, GS_ENOMEM, "cannot start a thread");
    }
    *out = cl;
    return 0;
}

void ext_cluster_stop(struct ext_cluster *cl)
{
    if (!cl)
        return;
    gs_worker_stop(&cl->wk);
    preempt_stop(cl);
    kube_watch_stop(cl->pods); /* its events wake the stopped worker: harmless */
    kube_watch_stop(cl->nodes);
    kube_watch_stop(atomic_load(&cl->pdbs)); /* the house thread that starts it is gone */
    gs_worker_destroy(&cl->wk);
    /* what ended since the last save, for the replica that leads next */
    if (cl->workload_loaded == 1 && may_bind(cl))
        workload_save(cl);
    free(cl->workload_saved);
    kube_leader_stop(cl->leader);
    ext_sched_set_commit(cl->s, &(struct ext_commit){0});
    free(cl);
}
