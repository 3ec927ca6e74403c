/* ext/quotas.c - see quotas.h. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "core/quota.h"
#include "ext/quotas.h"
#include "util/clock.h"
#include "kube/watch.h"
#include "kube/yaml.h"
#include "util/log.h"

/* One GPUQuota object seen in the cluster. */
struct qobj {
    char key[2 * CORE_NAME_MAX]; /* "ns/name" */
    int good;                    /* q holds its last good version */
    int broken;                  /* its current version is broken */
    char reported_rv[64];        /* version last reported broken */
    struct core_quota q;
};

struct ext_quotas {
    ext_quotas_publish publish;
    void *ud;
    struct kube_client *kc;
    int events;
    struct metric *m_objects, *m_broken, *m_reload_errors;
    /* file mode */
    char *path;
    struct timespec mtime;
    pthread_t thread;
    int has_thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    /* cluster mode */
    struct kube_watch *w;
    struct qobj *objs;
    int n, cap;
};

static void publish_set(struct ext_quotas *x, const struct core_quota *qs, int n, int broken)
{
    struct core_quotas *set = core_quotas_new();
    struct gs_err e = GS_ERR_INIT;

    if (!set)
        return;
    for (int i = 0; i < n; i++)
        core_quotas_put(set, &qs[i], &e);
    x->publish(x->ud, set);
    metric_set(x->m_objects, NULL, n);
    metric_set(x->m_broken, NULL, broken);
}

static int add_metrics(struct ext_quotas *x, struct metrics *m, struct gs_err *e)
{
    x->m_objects = metrics_add(m, METRIC_GAUGE, "gpusched_quota_objects",
                               "GPUQuota objects in force.", NULL, NULL, 0, e);
    x->m_broken = metrics_add(m, METRIC_GAUGE, "gpusched_quota_objects_broken",
                              "GPUQuota objects ignored because they are broken.", NULL, NULL,
                              0, e);
    x->m_reload_errors = metrics_add(m, METRIC_COUNTER, "gpusched_quota_reload_errors_total",
                                     "Quota files that could not be read (the quotas in force "
                                     "stay).", NULL, NULL, 0, e);
    return x->m_objects && x->m_broken && x->m_reload_errors ? 0 : -GS_EINVAL;
}

/* ---- a file ------------------------------------------------------------------ */

struct bad_file {
    const char *path;
    int n;
};

static void on_bad(void *ud, int index, const struct gs_err *e)
{
    struct bad_file *b = ud;
    b->n++;
    log_warn("quota", "%s: GPUQuota %d ignored: %s", b->path, index, e->msg);
}

static int load_file(struct ext_quotas *x, struct gs_err *e)
{
    struct stat st;
    json_t *doc;
    struct core_quota *qs;
    int n;
    struct bad_file bad = {x->path, 0};

    if (stat(x->path, &st) != 0)
        return gs_errf(e, GS_EIO, "%s: %s", x->path, strerror(errno));
    x->mtime = st.st_mtim;
    if (kube_yaml_load(x->path, &doc, e) < 0)
        return -GS_EINVAL;
    int rc = core_quota_parse_doc(doc, &qs, &n, on_bad, &bad, e);
    json_decref(doc);
    if (rc < 0) {
        gs_err_prefix(e, "%s", x->path);
        return rc;
    }
    publish_set(x, qs, n, bad.n);
    free(qs);
    log_info("quota", "%s: %d GPUQuota objects in force, %d broken ones ignored", x->path, n,
             bad.n);
    return 0;
}

static void *file_main(void *ud)
{
    struct ext_quotas *x = ud;
    pthread_mutex_lock(&x->mu);
    while (!x->stop) {
        struct timespec until = gs_mono_ts(gs_mono_s() + 1);
        struct stat st;
        pthread_cond_timedwait(&x->cv, &x->mu, &until);
        if (x->stop)
            break;
        if (stat(x->path, &st) != 0 || (st.st_mtim.tv_sec == x->mtime.tv_sec &&
                                        st.st_mtim.tv_nsec == x->mtime.tv_nsec))
            continue;
        struct gs_err e = GS_ERR_INIT;
        if (load_file(x, &e) < 0) {
            metric_inc(x->m_reload_errors, NULL);
            log_error("quota", "%s; keeping the quotas in force", e.msg);
        }
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

static struct ext_quotas *quotas_new(ext_quotas_publish publish, void *ud, struct metrics *m,
                                     struct gs_err *e)
{
    struct ext_quotas *x = calloc(1, sizeof *x);
    if (!x) {
        gs_errf(e, GS_ENOMEM, "out of memory");
        return NULL;
    }
    x->publish = publish;
    x->ud = ud;
    pthread_mutex_init(&x->mu, NULL);
    gs_cond_init_mono(&x->cv);
    if (add_metrics(x, m, e) < 0) {
        ext_quotas_stop(x);
        return NULL;
    }
    return x;
}

int ext_quotas_from_file(const char *path, ext_quotas_publish publish, void *ud,
                         struct metrics *m, struct ext_quotas **out, struct gs_err *e)
{
    struct ext_quotas *x = quotas_new(publish, ud, m, e);
    if (!x)
        return -GS_ENOMEM;
    if (!(x->path = strdup(path)) || load_file(x, e) < 0) {
        ext_quotas_stop(x);
        return -GS_EINVAL;
    }
    if (pthread_create(&x->thread, NULL, file_main, x) != 0) {
        ext_quotas_stop(x);
        return gs_errf(e, GS_ENOMEM, "cannot start a thread");
    }
    x->has_thread = 1;
    *out = x;
    return 0;
}

/* ---- the cluster ---------------------------------------------------------------- */

static struct qobj *find(struct ext_quotas *x, const char *key)
{
    for (int i = 0; i < x->n; i++)
        if (strcmp(x->objs[i].key, key) == 0)
            return &x->objs[i];
    return NULL;
}

static void republish(struct ext_quotas *x)
{
    struct core_quota *qs = calloc((size_t)x->n + 1, sizeof *qs);
    int n = 0, broken = 0;
    if (!qs)
        return;
    for (int i = 0; i < x->n; i++) {
        if (x->objs[i].good)
            qs[n++] = x->objs[i].q;
        broken += x->objs[i].broken;
    }
    publish_set(x, qs, n, broken);
    free(qs);
}

static void upsert(struct ext_quotas *x, const json_t *obj)
{
    const char *ns = kube_meta_str(obj, "namespace"), *name = kube_meta_str(obj, "name");
    const char *rv = kube_meta_str(obj, "resourceVersion");
    char key[2 * CORE_NAME_MAX];
    struct gs_err e = GS_ERR_INIT;
    struct core_quota q;
    struct qobj *o;

    if (!ns || !name)
        return;
    snprintf(key, sizeof key, "%s/%s", ns, name);
    if (!(o = find(x, key))) {
        if (x->n == x->cap) {
            int cap = x->cap ? 2 * x->cap : 16;
            struct qobj *no = realloc(x->objs, (size_t)cap * sizeof *no);
            if (!no)
                return;
            x->objs = no;
            x->cap = cap;
        }
        o = &x->objs[x->n++];
        memset(o, 0, sizeof *o);
        snprintf(o->key, sizeof o->key, "%s", key);
    }
    if (core_quota_parse(obj, &q, &e) == 0) {
        o->q = q;
        o->good = 1;
        o->broken = 0;
        return;
    }
    o->broken = 1;
    if (rv && strcmp(rv, o->reported_rv) == 0)
        return; /* reported already */
    snprintf(o->reported_rv, sizeof o->reported_rv, "%s", rv ? rv : "");
    log_warn("quota", "GPUQuota %s is broken and ignored%s: %s", key,
             o->good ? " (its last good version stays in force)" : "", e.msg);
    if (x->events) {
        struct gs_err ee = GS_ERR_INIT;
        char msg[700];
        snprintf(msg, sizeof msg, "ignored%s: %s",
                 o->good ? " (the last good version stays in force)" : "", e.msg);
        if (kube_event(x->kc, "GPUQuota", ns, name, kube_meta_str(obj, "uid"), "Warning",
                       "BrokenGPUQuota", msg, &ee) < 0)
            log_warn("quota", "cannot post an Event on GPUQuota %s: %s", key, ee.msg);
    }
}

static const char *obj_key(const json_t *obj, char *buf, size_t cap)
{
    const char *ns = kube_meta_str(obj, "namespace"), *name = kube_meta_str(obj, "name");
    snprintf(buf, cap, "%s/%s", ns ? ns : "", name ? name : "");
    return buf;
}

static void remove_key(struct ext_quotas *x, const char *key)
{
    struct qobj *o = find(x, key);
    if (o) {
        *o = x->objs[x->n - 1];
        x->n--;
    }
}

static void on_replace(void *ud, const json_t *items, const char *rv)
{
    struct ext_quotas *x = ud;
    size_t i;
    const json_t *obj;
    (void)rv;
    /* forget objects gone from the list, then (re)read the others */
    for (int k = x->n - 1; k >= 0; k--) {
        char key[2 * CORE_NAME_MAX];
        int seen = 0;
        json_array_foreach(items, i, obj) {
            seen |= strcmp(obj_key(obj, key, sizeof key), x->objs[k].key) == 0;
        }
        if (!seen)
            remove_key(x, x->objs[k].key);
    }
    json_array_foreach(items, i, obj)
        upsert(x, obj);
    republish(x);
}

static void on_event(void *ud, const char *type, const json_t *obj)
{
    struct ext_quotas *x = ud;
    if (strcmp(type, "DELETED") == 0) {
        char key[2 * CORE_NAME_MAX];
        remove_key(x, obj_key(obj, key, sizeof key));
    } else {
        upsert(x, obj);
    }
    republish(x);
}

/* The CRD is not served (deleted, or not installed yet): no GPUQuota
 * exists, and the caller knows it (it may have waited for a first set). */
static void on_absent(void *ud)
{
    struct ext_quotas *x = ud;
    x->n = 0;
    republish(x);
}

#define QUOTAS_PATH "/apis/gpusched.io/v1/gpuquotas"
#define QUOTAS_RECHECK_S 30 /* at most, between lists of a CRD not installed */

int ext_quotas_watch(struct kube_client *kc, int events, ext_quotas_publish publish, void *ud,
                     struct metrics *m, struct ext_quotas **out, struct gs_err *e)
{
    static const struct kube_watch_ops ops = {on_replace, on_event, NULL, on_absent};
    json_t *probe = NULL;
    int rc;

    *out = NULL;
    rc = kube_get(kc, QUOTAS_PATH "?limit=1", &probe, e);
    json_decref(probe);
    if (rc == -GS_ENOENT) /* the watch lists again until it is there */
        log_info("quota", "the GPUQuota CRD is not installed (deploy/crd-gpuquota.yaml): no "
                 "quotas until it is; looking again, at most %d s apart", QUOTAS_RECHECK_S);
    else if (rc < 0)
        return rc;
    struct ext_quotas *x = quotas_new(publish, ud, m, e);
    if (!x)
        return -GS_ENOMEM;
    x->kc = kc;
    x->events = events;
    struct kube_watch_opts wo = {.path = QUOTAS_PATH, .absent_ok = 1,
                                 .backoff_max_s = QUOTAS_RECHECK_S};
    if ((rc = kube_watch_start(kc, &wo, &ops, x, &x->w, e)) < 0) {
        ext_quotas_stop(x);
        return rc;
    }
    *out = x;
    return 0;
}

void ext_quotas_stop(struct ext_quotas *x)
{
    if (!x)
        return;
    if (x->has_thread) {
        pthread_mutex_lock(&x->mu);
        x->stop = 1;
        pthread_cond_broadcast(&x->cv);
        pthread_mutex_unlock(&x->mu);
        pthread_join(x->thread, NULL);
    }
    kube_watch_stop(x->w);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    free(x->objs);
    free(x->path);
    free(x);
}
