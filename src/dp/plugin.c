/* dp/plugin.c - see plugin.h; the RPC handlers are in dp/service.c. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "deviceplugin.pb-c.h"
#include "dp/inventory.h"
#include "dp/busy.h"
#include "dp/limiter.h"
#include "dp/plugin_internal.h"
#include "util/clock.h"
#include "util/log.h"

int64_t dp_now_ms(void)
{
    return (int64_t)(gs_mono_s() * 1000);
}

static void now_rfc3339(char *buf, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* What of a MIG GPU discovery does not offer, said, so that an operator
 * knows why: MIG devices left out (a GPU instance split into compute
 * instances), an NVML error while listing them, or none at all (a GPU in
 * MIG mode is never offered whole). */
static void warn_mig(const struct dp_inventory *inv)
{
    for (int i = 0; i < inv->n; i++) {
        const struct dp_gpu *g = &inv->gpu[i];
        if (g->mig_unnamed)
            log_warn("dp", "GPU %s: %d MIG devices not advertised: their compute instance is "
                     "smaller than their GPU instance (use one compute instance per GPU "
                     "instance)", g->uuid, g->mig_unnamed);
        if (g->mig_error[0])
            log_warn("dp", "GPU %s: MIG devices not listed: %s", g->uuid, g->mig_error);
        else if (g->mig_enabled && !g->n_mig && !g->mig_unnamed)
            log_warn("dp", "GPU %s is in MIG mode and has no MIG devices: nothing of it is "
                     "offered (create GPU and compute instances, or turn MIG mode off)",
                     g->uuid);
    }
}

static void wake(struct dp_plugin *p)
{
    uint64_t one = 1;
    if (write(p->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        log_warn("dp", "cannot wake the control loop: %s", strerror(errno));
}

/* The API thread publishes now (publish_needed is set). */
static void wake_api(struct dp_plugin *p)
{
    if (!p->api_on)
        return;
    atomic_store(&p->api_wake, 1);
    gs_worker_wake(&p->api);
}

const struct dp_resource *dp_plugin_find_res(const struct dp_plugin *p, const char *name)
{
    for (int i = 0; i < p->n_res; i++)
        if (strcmp(p->res[i].name, name) == 0)
            return &p->res[i];
    return NULL;
}

/* ---- servers and registration --------------------------------------------- */

static void notify_all(struct dp_plugin *p)
{
    pthread_mutex_lock(&p->srv_mu);
    for (int i = 0; i < p->n_srv; i++)
        if (p->srv[i].srv)
            dp_grpc_server_notify(p->srv[i].srv);
    pthread_mutex_unlock(&p->srv_mu);
}

static void stop_servers(struct dp_plugin *p)
{
    struct dp_grpc_server *old[DP_MAX_RESOURCES];
    int n;

    pthread_mutex_lock(&p->srv_mu);
    n = p->n_srv;
    for (int i = 0; i < n; i++) { /* all closing before one is stopped: a stop waits for
                                     its calls, and another server takes calls meanwhile */
        atomic_store(&p->srv[i].closing, 1);
        old[i] = p->srv[i].srv;
        p->srv[i].srv = NULL;
    }
    pthread_mutex_unlock(&p->srv_mu);
    for (int i = 0; i < n; i++) {
        dp_grpc_server_stop(old[i]);
        if (old[i])
            unlink(p->srv[i].sock);
    }
}

/* Starts the servers that are not running: at start, and again from the
 * control loop while one cannot listen (its directory missing or read-only
 * for a while); a failure is said once, and its end. */
static void serve_missing(struct dp_plugin *p)
{
    pthread_mutex_lock(&p->srv_mu);
    for (int i = 0; i < p->n_srv; i++) {
        struct dp_server *s = &p->srv[i];
        struct gs_err e = GS_ERR_INIT;
        if (s->srv)
            continue;
        atomic_store(&s->closing, 0);
        if (dp_grpc_server_start(s->sock, dp_service_methods, s, &s->srv, &e) != 0) {
            if (!s->start_failed)
                log_error("dp", "%s: %s; trying again every second", s->name, e.msg);
            s->start_failed = 1;
        } else {
            log_info("dp", "serving %s on %s", s->name, s->sock);
            s->start_failed = 0;
        }
    }
    pthread_mutex_unlock(&p->srv_mu);
}

/* Keeps each server's down_since, which /healthz reads. */
static void note_down(struct dp_plugin *p, int64_t now)
{
    for (int i = 0; i < p->n_srv; i++) {
        struct dp_server *s = &p->srv[i];
        int up = s->srv && s->registered;
        if (up)
            atomic_store(&s->down_since, 0);
        else if (!atomic_load(&s->down_since))
            atomic_store(&s->down_since, now);
    }
}

int dp_plugin_serving(struct dp_plugin *p, char *why, size_t cap)
{
    int64_t now = dp_now_ms();
    int64_t grace_ms = (int64_t)(p->cfg.healthz_grace_s > 0 ? p->cfg.healthz_grace_s : 60) * 1000;
    int ok = 1;
    /* a control loop stuck (a call that never returns): nothing registers
     * or publishes again; said before taking srv_mu, which it may hold */
    int64_t beat = atomic_load(&p->beat_ms);
    if (beat && now - beat > grace_ms) {
        snprintf(why, cap, "the control loop has not turned for %lld s",
                 (long long)((now - beat) / 1000));
        return 0;
    }
    pthread_mutex_lock(&p->srv_mu);
    for (int i = 0; i < p->n_srv && ok; i++) {
        const struct dp_server *s = &p->srv[i];
        int64_t since = atomic_load(&s->down_since);
        if (since && now - since > grace_ms) {
            snprintf(why, cap, "%s: %s for %lld s", s->name,
                     s->srv ? "not registered with kubelet" : "cannot listen on its socket",
                     (long long)((now - since) / 1000));
            ok = 0;
        }
    }
    pthread_mutex_unlock(&p->srv_mu);
    return ok;
}

static void start_servers(struct dp_plugin *p)
{
    char names[DP_MAX_RESOURCES][DP_RESOURCE_MAX];
    int n;

    pthread_mutex_lock(&p->mu);
    n = p->n_res;
    for (int i = 0; i < n; i++)
        snprintf(names[i], sizeof names[i], "%s", p->res[i].name);
    p->restart_needed = 0;
    pthread_mutex_unlock(&p->mu);

    pthread_mutex_lock(&p->srv_mu);
    p->n_srv = n;
    for (int i = 0; i < n; i++) {
        struct dp_server *s = &p->srv[i];
        s->p = p;
        s->registered = 0;
        s->nostream_since = 0;
        s->start_failed = 0;
        atomic_store(&s->down_since, dp_now_ms());
        snprintf(s->name, sizeof s->name, "%.63s", names[i]);
        dp_devices_socket_name(s->name, s->endpoint, sizeof s->endpoint);
        snprintf(s->sock, sizeof s->sock, "%s/%s", p->cfg.kubelet_dir, s->endpoint);
    }
    pthread_mutex_unlock(&p->srv_mu);
    serve_missing(p);
}

static int register_one(struct dp_plugin *p, struct dp_server *s, struct gs_err *e)
{
    char kubelet[PATH_MAX];
    V1beta1__RegisterRequest r = V1BETA1__REGISTER_REQUEST__INIT;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;
    uint8_t buf[512], *resp = NULL;
    size_t resp_len = 0;

    snprintf(kubelet, sizeof kubelet, "%s/kubelet.sock", p->cfg.kubelet_dir);
    struct stat st;
    s->kubelet_ino = stat(kubelet, &st) == 0 ? st.st_ino : 0;
    o.pre_start_required = p->cfg.api != NULL;
    o.get_preferred_allocation_available = 1;
    r.version = (char *)"v1beta1";
    r.endpoint = s->endpoint;
    r.resource_name = s->name;
    r.options = &o;
    size_t len = v1beta1__register_request__get_packed_size(&r);
    if (len > sizeof buf)
        return gs_errf(e, GS_ETOOBIG, "RegisterRequest is too large");
    v1beta1__register_request__pack(&r, buf);
    int rc = dp_grpc_call(kubelet, "/v1beta1.Registration/Register", buf, len,
                          p->cfg.register_timeout_ms, &resp, &resp_len, e);
    free(resp);
    return rc;
}

/* Registers every server not yet registered; returns how many are left.
 * A failure is logged as a warning the first time, then at debug level
 * until a registration succeeds again. */
static int register_all(struct dp_plugin *p, int *quiet)
{
    int left = 0;

    for (int i = 0; i < p->n_srv; i++) {
        struct dp_server *s = &p->srv[i];
        struct gs_err e = GS_ERR_INIT;
        if (s->registered || !s->srv)
            continue;
        if (register_one(p, s, &e) == 0) {
            s->registered = 1;
            s->nostream_since = 0;
            *quiet = 0;
            log_info("dp", "registered %s with kubelet (endpoint %s)", s->name, s->endpoint);
        } else {
            left++;
            log_msg(*quiet ? LOG_DEBUG : LOG_WARN, "dp", "register %s: %s", s->name, e.msg);
        }
        pthread_mutex_lock(&p->mu);
        if (s->registered)
            p->n_register++;
        else
            p->n_register_err++;
        pthread_mutex_unlock(&p->mu);
    }
    if (left)
        *quiet = 1;
    return left;
}

/* kubelet ends a plugin's ListAndWatch stream only when it drops the
 * plugin: it marks the devices unhealthy and never dials again. On 1.25 and
 * later the end of a replaced stream can also drop the registration that
 * replaced it (kubernetes#121994). So a registered server that holds no
 * stream for DP_STREAM_GRACE_MS registers again. */
#define DP_STREAM_GRACE_MS 10000
static void check_streams(struct dp_plugin *p, int64_t now)
{
    for (int i = 0; i < p->n_srv; i++) {
        struct dp_server *s = &p->srv[i];
        if (!s->srv || !s->registered || dp_grpc_server_streams(s->srv) > 0) {
            s->nostream_since = 0;
            continue;
        }
        if (!s->nostream_since) {
            s->nostream_since = now;
        } else if (now - s->nostream_since >= DP_STREAM_GRACE_MS) {
            log_warn("dp", "%s: kubelet has held no ListAndWatch stream for %lld s; registering "
                     "again", s->name, (long long)((now - s->nostream_since) / 1000));
            s->registered = 0;
            s->nostream_since = 0;
        }
    }
}

/* ---- health thread -------------------------------------------------------- */

static int same_names(const struct dp_resource *a, int na, const struct dp_resource *b, int nb)
{
    if (na != nb)
        return 0;
    for (int i = 0; i < na; i++)
        if (strcmp(a[i].name, b[i].name) != 0)
            return 0;
    return 1;
}

/* Re-discovers after the backend saw GPUs come or go. Caller holds mu. */
static void rediscover_locked(struct dp_plugin *p)
{
    struct gs_err e = GS_ERR_INIT;
    struct dp_inventory *inv = malloc(sizeof *inv);
    struct dp_health_state *hs = malloc(sizeof *hs);
    struct dp_resource *res = calloc(DP_MAX_RESOURCES, sizeof *res);

    if (!inv || !hs || !res || p->b->discover(p->b, inv, &e) != 0) {
        log_error("dp", "re-discovery failed, keeping the last inventory: %s",
                  e.msg[0] ? e.msg : "out of memory");
        goto out;
    }
    warn_mig(inv);
    dp_health_carry(&p->inv, &p->hs, inv, hs);
    int n = dp_devices_build(inv, &p->cfg.devices, res, DP_MAX_RESOURCES);
    if (!same_names(p->res, p->n_res, res, n))
        p->restart_needed = 1;
    log_info("dp", "inventory changed: %d GPUs (was %d)", inv->n, p->inv.n);
    p->inv = *inv;
    p->hs = *hs;
    memcpy(p->res, res, (size_t)n * sizeof *res);
    p->n_res = n;
out:
    free(inv);
    free(hs);
    free(res);
}

/* Every DP_BUSY_PERIOD_MS, each shared container's own GPU utilisation to
 * its util file (dp/busy.h), for its limiter's compute throttle. */
#define DP_BUSY_PERIOD_MS 200
static void *busy_thread(void *arg)
{
    struct dp_plugin *p = arg;
    struct dp_busy st;
    memset(&st, 0, sizeof st);
    while (!p->stopping) {
        struct timespec ts = {0, DP_BUSY_PERIOD_MS * 1000000L};
        nanosleep(&ts, NULL);
        dp_busy_pass(&st, p->cfg.alloc.limiter_dir, p->b, "/proc");
    }
    return NULL;
}

static void *health_thread(void *arg)
{
    struct dp_plugin *p = arg;
    int64_t last_err_log = 0;

    while (!p->stopping) {
        struct dp_event ev;
        struct gs_err e = GS_ERR_INIT;
        int changed = 0, restart;

        memset(&ev, 0, sizeof ev);
        int rc = p->b->wait_event(p->b, 200, &ev, &e);
        if (rc < 0) {
            if (dp_now_ms() - last_err_log > 60000) {
                log_error("dp", "health events: %s", e.msg);
                last_err_log = dp_now_ms();
            }
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
        }
        /* the event source failed: which GPUs still answer, probed
         * without the lock (a probe can hang on a bad GPU) */
        char dead[DP_MAX_GPUS][DP_UUID_MAX];
        int n_dead = -1;
        if (rc == 1 && ev.all && p->b->probe) {
            char uuids[DP_MAX_GPUS][DP_UUID_MAX];
            pthread_mutex_lock(&p->mu);
            int n = p->inv.n;
            for (int i = 0; i < n; i++)
                snprintf(uuids[i], sizeof uuids[i], "%s", p->inv.gpu[i].uuid);
            pthread_mutex_unlock(&p->mu);
            n_dead = 0;
            for (int i = 0; i < n; i++) {
                struct gs_err pe = GS_ERR_INIT;
                if (p->b->probe(p->b, uuids[i], &pe) != 0)
                    memcpy(dead[n_dead++], uuids[i], sizeof dead[0]);
            }
        }
        /* and the GPUs whose re-probe is due, without the lock as well */
        char due[DP_MAX_GPUS][DP_UUID_MAX];
        struct gs_err res[DP_MAX_GPUS];
        int64_t now = dp_now_ms();
        pthread_mutex_lock(&p->mu);
        int n_due = dp_health_due(&p->inv, &p->hs, now, due);
        pthread_mutex_unlock(&p->mu);
        for (int k = 0; k < n_due; k++) {
            res[k] = (struct gs_err)GS_ERR_INIT;
            p->b->probe(p->b, due[k], &res[k]);
        }
        int64_t probed = n_due ? dp_now_ms() : now;
        pthread_mutex_lock(&p->mu);
        if (rc == 1) {
            enum dp_xid_class k = dp_health_classify(&p->cfg.health, ev.xid);
            changed |= dp_health_event(&p->cfg.health, &p->inv, &p->hs, &ev,
                                       n_dead < 0 ? NULL : (const char (*)[DP_UUID_MAX])dead,
                                       n_dead, dp_now_ms());
            /* A failing event source repeats at once: say it when it
             * changes something, and do not spin on it. */
            if (!ev.all || changed) {
                char inst[48] = "";
                if (ev.instance)
                    snprintf(inst, sizeof inst, " (MIG instance gi %u ci %d)", ev.gi,
                             ev.ci == DP_NO_INSTANCE ? -1 : (int)ev.ci);
                log_info("dp", "health event on %s%s: XID %llu (%s)%s%s",
                         ev.all ? "all GPUs" : ev.uuid, inst, (unsigned long long)ev.xid,
                         dp_xid_class_name(k), e.msg[0] ? ": " : "", e.msg);
            }
        } else if (rc == 2) {
            rediscover_locked(p);
            changed = 1;
        }
        changed |= dp_health_reprobed(&p->cfg.health, &p->inv, &p->hs, due, res, n_due, now,
                                      probed) > 0;
        if (changed)
            p->publish_needed = 1;
        restart = p->restart_needed;
        pthread_mutex_unlock(&p->mu);
        if (changed) {
            notify_all(p);
            wake_api(p);
        }
        if (restart)
            wake(p);
        if (rc == 1 && ev.all) {
            struct timespec ts = {1, 0};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* ---- control loop --------------------------------------------------------- */

/* 0, or -1 when the API server did not take it (publish_needed is set
 * again). */
static int publish(struct dp_plugin *p)
{
    struct gs_err e = GS_ERR_INIT;
    struct dp_inventory *inv = malloc(sizeof *inv);
    int rc = 0;

    if (!inv)
        return -1;
    pthread_mutex_lock(&p->mu);
    *inv = p->inv;
    p->publish_needed = 0;
    pthread_mutex_unlock(&p->mu);
    if (p->cfg.api->publish(p->cfg.api->ud, inv, &e) != 0) {
        log_warn("dp", "publishing the node inventory: %s", e.msg);
        pthread_mutex_lock(&p->mu);
        p->publish_needed = 1;
        p->n_publish_err++;
        pthread_mutex_unlock(&p->mu);
        rc = -1;
    }
    free(inv);
    return rc;
}

/* Ledger directories of pods gone from the node, or finished, go with them
 * (a process still holding one keeps it: dp_limiter_prune). Every node
 * lists its pods each publish for this: from the API server's cache (a
 * pod it does not have yet has a directory younger than the 600 s kept). */
static void prune_ledgers(struct dp_plugin *p)
{
    struct gs_err e = GS_ERR_INIT;
    json_t *pods = NULL;
    int (*list)(void *, json_t **, struct gs_err *) =
        p->cfg.api->list_pods_cached ? p->cfg.api->list_pods_cached : p->cfg.api->list_pods;
    if (list(p->cfg.api->ud, &pods, &e) != 0) {
        log_debug("dp", "limiter: not pruning ledgers: %s", e.msg);
        json_decref(pods); /* the API server's Status, if it sent one */
        return;
    }
    const json_t *items = json_object_get(pods, "items");
    size_t n = json_array_size(items);
    char **uids = calloc(n ? n : 1, sizeof *uids);
    int k = 0;
    for (size_t i = 0; uids && i < n; i++) {
        const json_t *pod = json_array_get(items, i);
        const char *u = json_string_value(json_object_get(json_object_get(pod, "metadata"), "uid"));
        const char *phase =
            json_string_value(json_object_get(json_object_get(pod, "status"), "phase"));
        /* a finished pod stays listed until deleted (a Job's, maybe never):
         * its containers are gone */
        if (u && !(phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)))
            uids[k++] = (char *)u;
    }
    if (uids && json_is_array(items)) {
        int r = dp_limiter_prune(p->cfg.alloc.limiter_dir, uids, k, 600);
        if (r)
            log_info("dp", "limiter: removed %d ledger directories of pods gone from the node", r);
    }
    free(uids);
    json_decref(pods);
}

/* The limiter's per-container memory, for `gpusched status`. */
static void publish_usage(struct dp_plugin *p)
{
    struct gs_err e = GS_ERR_INIT;
    char now[32];
    if (!p->cfg.api->publish_usage)
        return;
    now_rfc3339(now, sizeof now);
    char *doc = dp_limiter_usage_json(p->cfg.alloc.limiter_dir, now);
    if (doc && p->cfg.api->publish_usage(p->cfg.api->ud, doc, &e) != 0) {
        log_warn("dp", "publishing in-container GPU use: %s", e.msg);
        pthread_mutex_lock(&p->mu);
        p->n_publish_err++;
        pthread_mutex_unlock(&p->mu);
    }
    free(doc);
}

/* The node's inventory, ledgers and in-container use, on a thread of their
 * own: an API call takes up to the client's timeout (10 s) when the API
 * server is slow or gone, and on the control loop it held back the
 * registration after a kubelet restart. */
static void *api_thread(void *arg)
{
    struct dp_plugin *p = arg;
    /* after a failed publish, the next one waits 1 s, doubling up to 60 s:
     * a thousand nodes must not retry at once every 100 ms while the API
     * server comes back (or while their RBAC forbids the patch) */
    int64_t backoff = 0, retry_at = 0, next = 0;
    while (!gs_worker_stopping(&p->api)) {
        atomic_store(&p->api_wake, 0);
        int64_t t = dp_now_ms();
        pthread_mutex_lock(&p->mu);
        int pub = p->publish_needed;
        pthread_mutex_unlock(&p->mu);
        if ((pub && t >= retry_at) || t >= next) {
            int ok = publish(p) == 0;
            if (ok && p->cfg.alloc.limiter_dir) {
                prune_ledgers(p);
                publish_usage(p);
            }
            backoff = ok ? 0 : backoff ? (backoff * 2 > 60000 ? 60000 : backoff * 2) : 1000;
            retry_at = t + backoff;
            next = t + (int64_t)p->cfg.publish_interval_s * 1000;
            if (!ok && next < retry_at)
                next = retry_at;
        }
        pthread_mutex_lock(&p->mu);
        pub = p->publish_needed;
        pthread_mutex_unlock(&p->mu);
        int64_t until = pub && retry_at < next ? retry_at : next;
        t = dp_now_ms();
        gs_worker_sleep(&p->api, until > t ? (double)(until - t) / 1000 : 0.01, &p->api_wake);
    }
    return NULL;
}

static void api_stop(struct dp_plugin *p)
{
    if (!p->api_on)
        return;
    gs_worker_stop(&p->api);
    gs_worker_destroy(&p->api);
    p->api_on = 0;
}

/* Reads inotify events; returns 1 when kubelet restarted (kubelet.sock
 * created) or one of our sockets was removed. *lost: the watch went with
 * its directory (removed, to be made again). */
static int kubelet_restarted(struct dp_plugin *p, int fd, int *lost)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int hit = 0;
    ssize_t n;

    while ((n = read(fd, buf, sizeof buf)) > 0) {
        for (char *q = buf; q < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)q;
            q += sizeof *ev + ev->len;
            *lost |= (ev->mask & IN_IGNORED) != 0;
            if (!ev->len)
                continue;
            if ((ev->mask & (IN_CREATE | IN_MOVED_TO)) && strcmp(ev->name, "kubelet.sock") == 0) {
                /* Already registered through this very kubelet.sock (we
                 * noticed our socket go first)? Then nothing to do. */
                char path[PATH_MAX];
                struct stat st;
                int fresh = 0;
                snprintf(path, sizeof path, "%s/kubelet.sock", p->cfg.kubelet_dir);
                int ok = stat(path, &st) == 0;
                for (int i = 0; i < p->n_srv; i++)
                    fresh |= !p->srv[i].registered || !ok || p->srv[i].kubelet_ino != st.st_ino;
                if (fresh) {
                    log_info("dp", "kubelet.sock created: kubelet restarted, registering again");
                    hit = 1;
                }
            }
            if (ev->mask & (IN_DELETE | IN_MOVED_FROM))
                for (int i = 0; i < p->n_srv; i++) {
                    struct stat st;
                    if (strcmp(ev->name, p->srv[i].endpoint) == 0 &&
                        lstat(p->srv[i].sock, &st) != 0) {
                        log_info("dp", "%s was removed: serving and registering again",
                                 p->srv[i].sock);
                        hit = 1;
                    }
                }
        }
    }
    return hit;
}

/* A socket of ours gone without an event to say so: its directory was
 * removed and made again (the watch went with it), or the events
 * overflowed. Kubelet cannot dial it: serve again. */
static int socket_gone(struct dp_plugin *p)
{
    struct stat st;
    for (int i = 0; i < p->n_srv; i++)
        if (p->srv[i].srv && lstat(p->srv[i].sock, &st) != 0) {
            log_info("dp", "%s is gone: serving and registering again", p->srv[i].sock);
            return 1;
        }
    return 0;
}

int dp_plugin_run(struct dp_plugin *p, volatile sig_atomic_t *stop, struct gs_err *e)
{
    struct stat st;
    int64_t next_register = 0, backoff = 100;
    int quiet = 0;

    if (stat(p->cfg.kubelet_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return gs_errf(e, GS_ENOENT, "--kubelet-dir %s: not a directory", p->cfg.kubelet_dir);
    const uint32_t watch = IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM;
    int64_t next_check = 0;
    int lost = 0;
    int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ino < 0)
        return gs_errf(e, GS_EIO, "inotify_init1: %s", strerror(errno));
    if (inotify_add_watch(ino, p->cfg.kubelet_dir, watch) < 0) {
        int rc = gs_errf(e, GS_EIO, "inotify on %s: %s", p->cfg.kubelet_dir, strerror(errno));
        close(ino);
        return rc;
    }
    p->stopping = 0;
    /* before the health thread, which wakes it */
    p->api_on = p->cfg.api && gs_worker_start(&p->api, api_thread, p) == 0;
    if (p->cfg.api && !p->api_on) {
        close(ino);
        return gs_errf(e, GS_ENOMEM, "cannot start the thread that publishes the inventory");
    }
    if (pthread_create(&p->health, NULL, health_thread, p) != 0) {
        api_stop(p);
        close(ino);
        return gs_errf(e, GS_ENOMEM, "cannot start the health thread");
    }
    p->busy_on = p->cfg.alloc.limiter_dir && p->b->proc_util &&
                 pthread_create(&p->busy, NULL, busy_thread, p) == 0;

    start_servers(p);

    while (!*stop) {
        struct pollfd fds[2] = {{ino, POLLIN, 0}, {p->wake_fd, POLLIN, 0}};
        int64_t t = dp_now_ms();
        int restart = 0;

        atomic_store(&p->beat_ms, t);

        if (poll(fds, 2, 100) > 0) {
            if (fds[0].revents & POLLIN)
                restart = kubelet_restarted(p, ino, &lost);
            if (fds[1].revents & POLLIN) {
                uint64_t v;
                if (read(p->wake_fd, &v, sizeof v) < 0 && errno != EAGAIN)
                    log_warn("dp", "wake fd: %s", strerror(errno));
            }
        }
        if (*stop)
            break;
        pthread_mutex_lock(&p->mu);
        restart |= p->restart_needed;
        pthread_mutex_unlock(&p->mu);
        t = dp_now_ms();
        if (t >= next_check) { /* what the events may not have said */
            next_check = t + 1000;
            if (lost && inotify_add_watch(ino, p->cfg.kubelet_dir, watch) >= 0) {
                log_info("dp", "%s made again: watching it again", p->cfg.kubelet_dir);
                lost = 0;
                restart = 1;
            }
            restart |= socket_gone(p);
        }
        if (restart) {
            stop_servers(p);
            start_servers(p);
            next_register = 0;
            backoff = 100;
            quiet = 0;
        }
        t = dp_now_ms();
        check_streams(p, t);
        if (t >= next_register) {
            int left = 0;
            serve_missing(p);
            for (int i = 0; i < p->n_srv; i++)
                left += !p->srv[i].registered && p->srv[i].srv;
            if (left && register_all(p, &quiet)) {
                next_register = t + backoff;
                backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
            } else {
                next_register = t + 1000;
            }
        }
        note_down(p, t);
    }
    log_info("dp", "stopping");
    p->stopping = 1;
    pthread_join(p->health, NULL);
    if (p->busy_on)
        pthread_join(p->busy, NULL);
    api_stop(p); /* after the health thread, which wakes it */
    stop_servers(p);
    close(ino);
    return 0;
}

/* ---- lifecycle, metrics --------------------------------------------------- */

int dp_plugin_new(const struct dp_plugin_cfg *cfg, struct dp_backend *b, struct dp_plugin **out,
                  struct gs_err *e)
{
    struct dp_plugin *p = calloc(1, sizeof *p);
    int rc;

    *out = NULL;
    if (!p || !(p->res = calloc(DP_MAX_RESOURCES, sizeof *p->res))) {
        if (p)
            free(p);
        b->close(b);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    p->cfg = *cfg;
    p->b = b;
    p->wake_fd = -1;
    pthread_mutex_init(&p->mu, NULL);
    pthread_mutex_init(&p->srv_mu, NULL);
    p->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (p->wake_fd < 0) {
        rc = gs_errf(e, GS_EIO, "eventfd: %s", strerror(errno));
        dp_plugin_free(p);
        return rc;
    }
    if ((rc = b->discover(b, &p->inv, e)) != 0) {
        dp_plugin_free(p);
        return rc;
    }
    warn_mig(&p->inv);
    p->n_res = dp_devices_build(&p->inv, &p->cfg.devices, p->res, DP_MAX_RESOURCES);
    p->publish_needed = 1;
    *out = p;
    return 0;
}

void dp_plugin_free(struct dp_plugin *p)
{
    if (!p)
        return;
    if (p->b)
        p->b->close(p->b);
    for (int i = 0; i < p->n_claims; i++)
        free(p->claims[i].ids);
    free(p->claims);
    free(p->res);
    if (p->wake_fd >= 0)
        close(p->wake_fd);
    pthread_mutex_destroy(&p->mu);
    pthread_mutex_destroy(&p->srv_mu);
    free(p);
}

json_t *dp_plugin_inventory(struct dp_plugin *p)
{
    char now[32];

    now_rfc3339(now, sizeof now);
    pthread_mutex_lock(&p->mu);
    json_t *j = dp_inventory_json(&p->inv, now);
    pthread_mutex_unlock(&p->mu);
    return j;
}

/* Prometheus label values escape backslash, quote and newline. */
static void esc(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; *in && n + 3 < cap; in++) {
        if (*in == '\\' || *in == '"') {
            out[n++] = '\\';
            out[n++] = *in;
        } else if (*in == '\n') {
            out[n++] = '\\';
            out[n++] = 'n';
        } else {
            out[n++] = *in;
        }
    }
    out[n] = '\0';
}

struct lim_rows {
    struct dp_limiter_usage *r;
    size_t n, cap;
};

static void limiter_row(void *ud, const struct dp_limiter_usage *u)
{
    struct lim_rows *rs = ud;
    if (rs->n == rs->cap) {
        size_t cap = rs->cap ? 2 * rs->cap : 64;
        struct dp_limiter_usage *r = realloc(rs->r, cap * sizeof *r);
        if (!r)
            return; /* out of memory: the scrape shows fewer rows */
        rs->r = r;
        rs->cap = cap;
    }
    rs->r[rs->n++] = *u;
}

/* Per-container memory and utilisation from the in-container limiter's
 * ledgers, read once per scrape. */
static void limiter_metrics(FILE *f, const char *dir)
{
    static const char *const help[3] = {
        "# HELP gpusched_dp_container_gpu_memory_used_bytes GPU memory a container's "
        "processes hold, per CUDA device, from its limiter ledger.\n"
        "# TYPE gpusched_dp_container_gpu_memory_used_bytes gauge\n",
        "# HELP gpusched_dp_container_gpu_memory_limit_bytes The container's limit per "
        "CUDA device.\n# TYPE gpusched_dp_container_gpu_memory_limit_bytes gauge\n",
        "# HELP gpusched_dp_container_gpu_utilization The container's own share of the "
        "GPU's SM time per CUDA device (0..1), as its limiter steers by it.\n"
        "# TYPE gpusched_dp_container_gpu_utilization gauge\n",
    };
    struct lim_rows rs = {0};
    int bad = 0;
    int n = dp_limiter_scan(dir, limiter_row, &rs, &bad);
    for (int pass = 0; pass < 3; pass++) {
        fputs(help[pass], f);
        for (size_t i = 0; i < rs.n; i++) {
            const struct dp_limiter_usage *u = &rs.r[i];
            char owner[2 * sizeof u->owner];
            esc(u->owner, owner, sizeof owner);
            if (pass == 2 && u->util >= 0)
                fprintf(f, "gpusched_dp_container_gpu_utilization{container=\"%s\",device=\"%d\"} "
                        "%.3f\n", owner, u->dev, u->util / 1000.0);
            else if (pass < 2 && dp_limiter_has_memory(u))
                fprintf(f, "gpusched_dp_container_gpu_memory_%s_bytes{container=\"%s\",device=\"%d\"} "
                        "%llu\n", pass ? "limit" : "used", owner, u->dev,
                        (unsigned long long)(pass ? u->limit : u->used));
        }
    }
    free(rs.r);
    fprintf(f, "# TYPE gpusched_dp_limiter_ledgers gauge\ngpusched_dp_limiter_ledgers %d\n"
               "# TYPE gpusched_dp_limiter_ledger_errors gauge\ngpusched_dp_limiter_ledger_errors %d\n",
            n, bad);
}

char *dp_plugin_metrics(struct dp_plugin *p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    if (!f)
        return NULL;
    pthread_mutex_lock(&p->mu);
    fprintf(f, "# HELP gpusched_dp_gpu_healthy 1 if the GPU is healthy; reason says why not.\n"
               "# TYPE gpusched_dp_gpu_healthy gauge\n");
    for (int i = 0; i < p->inv.n; i++) {
        char model[2 * DP_NAME_MAX], reason[300];
        esc(p->inv.gpu[i].model, model, sizeof model);
        esc(p->inv.gpu[i].reason, reason, sizeof reason);
        fprintf(f, "gpusched_dp_gpu_healthy{uuid=\"%s\",index=\"%d\",model=\"%s\",reason=\"%s\"} %d\n",
                p->inv.gpu[i].uuid, p->inv.gpu[i].index, model, reason, p->inv.gpu[i].healthy);
    }
    fprintf(f, "# HELP gpusched_dp_mig_healthy 1 if the MIG instance is healthy (its GPU is "
               "gpusched_dp_gpu_healthy); reason says why not.\n"
               "# TYPE gpusched_dp_mig_healthy gauge\n");
    for (int i = 0; i < p->inv.n; i++)
        for (int m = 0; m < p->inv.gpu[i].n_mig; m++) {
            const struct dp_mig *mi = &p->inv.gpu[i].mig[m];
            char reason[300];
            esc(mi->reason, reason, sizeof reason);
            fprintf(f, "gpusched_dp_mig_healthy{uuid=\"%s\",gpu_uuid=\"%s\",profile=\"%s\","
                       "reason=\"%s\"} %d\n", mi->uuid, p->inv.gpu[i].uuid, mi->profile, reason,
                    mi->healthy);
        }
    fprintf(f, "# HELP gpusched_dp_gpu_xid_events_total Health events counted per GPU "
               "(its MIG instances' included).\n"
               "# TYPE gpusched_dp_gpu_xid_events_total counter\n");
    for (int i = 0; i < p->inv.n; i++)
        fprintf(f, "gpusched_dp_gpu_xid_events_total{uuid=\"%s\"} %llu\n", p->inv.gpu[i].uuid,
                (unsigned long long)p->hs.xids[i]);
    fprintf(f, "# TYPE gpusched_dp_devices gauge\n");
    for (int i = 0; i < p->n_res; i++)
        fprintf(f, "gpusched_dp_devices{resource=\"%s\"} %d\n", p->res[i].name, p->res[i].n);
    fprintf(f,
            "# TYPE gpusched_dp_allocate_total counter\ngpusched_dp_allocate_total %llu\n"
            "# TYPE gpusched_dp_allocate_errors_total counter\n"
            "gpusched_dp_allocate_errors_total %llu\n"
            "# TYPE gpusched_dp_prestart_errors_total counter\n"
            "gpusched_dp_prestart_errors_total %llu\n"
            "# TYPE gpusched_dp_registrations_total counter\n"
            "gpusched_dp_registrations_total %llu\n"
            "# TYPE gpusched_dp_registration_errors_total counter\n"
            "gpusched_dp_registration_errors_total %llu\n"
            "# TYPE gpusched_dp_publish_errors_total counter\n"
            "gpusched_dp_publish_errors_total %llu\n",
            (unsigned long long)p->n_alloc, (unsigned long long)p->n_alloc_err,
            (unsigned long long)p->n_prestart_err, (unsigned long long)p->n_register,
            (unsigned long long)p->n_register_err, (unsigned long long)p->n_publish_err);
    pthread_mutex_unlock(&p->mu);
    fprintf(f, "# HELP gpusched_dp_streams Open ListAndWatch streams (kubelet connections).\n"
               "# TYPE gpusched_dp_streams gauge\n");
    pthread_mutex_lock(&p->srv_mu);
    for (int i = 0; i < p->n_srv; i++)
        if (p->srv[i].srv)
            fprintf(f, "gpusched_dp_streams{resource=\"%s\"} %d\n", p->srv[i].name,
                    dp_grpc_server_streams(p->srv[i].srv));
    pthread_mutex_unlock(&p->srv_mu);
    if (p->cfg.alloc.limiter_dir)
        limiter_metrics(f, p->cfg.alloc.limiter_dir);
    fclose(f);
    return buf;
}
