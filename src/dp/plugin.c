/* dp/plugin.c - see plugin.h. */
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
#include "dp/grpc.h"
#include "dp/inventory.h"
#include "dp/plugin.h"
#include "dp/podres.h"
#include "util/log.h"

#define MAX_CLAIMS 4096
#define CLAIM_TTL_MS (24LL * 3600 * 1000)
#define PODRES_TIMEOUT_MS 5000

struct server {
    struct dp_plugin *p;
    char name[DP_RESOURCE_MAX];
    char endpoint[96];          /* socket file name */
    char sock[PATH_MAX];
    struct dp_grpc_server *srv; /* guarded by p->srv_mu */
    int registered;             /* control thread only */
    ino_t kubelet_ino;          /* the kubelet.sock it registered through */
};

/* A container this plugin answered Allocate for. */
struct claim {
    char key[DP_KEY_MAX];       /* "ns/pod/container" */
    char uid_key[DP_KEY_MAX];   /* "uid:<uid>/container" */
    char resource[DP_RESOURCE_MAX];
    char *ids;                  /* sorted device IDs, comma-joined */
    int64_t at_ms;
};

struct dp_plugin {
    struct dp_plugin_cfg cfg;
    struct dp_backend *b;

    pthread_mutex_t mu;         /* inventory, health, resources, claims, counters */
    struct dp_inventory inv;
    struct dp_health_state hs;
    int n_res;
    struct dp_resource *res;    /* DP_MAX_RESOURCES */
    int restart_needed, publish_needed;
    struct claim *claims;
    int n_claims;
    uint64_t n_alloc, n_alloc_err, n_prestart_err, n_register, n_register_err, n_publish_err;

    pthread_mutex_t srv_mu;     /* the server pointers; taken before any server's lock */
    int n_srv;
    struct server srv[DP_MAX_RESOURCES];

    int wake_fd;
    pthread_t health;
    volatile int stopping;
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void now_rfc3339(char *buf, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void wake(struct dp_plugin *p)
{
    uint64_t one = 1;
    if (write(p->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN)
        log_warn("dp", "cannot wake the control loop: %s", strerror(errno));
}

static const struct dp_resource *find_res(const struct dp_plugin *p, const char *name)
{
    for (int i = 0; i < p->n_res; i++)
        if (strcmp(p->res[i].name, name) == 0)
            return &p->res[i];
    return NULL;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted, comma-joined copy of a set of IDs (malloc'd). */
static char *ids_key(char *const *ids, size_t n)
{
    char **s = malloc((n ? n : 1) * sizeof *s);
    size_t len = 1;
    char *out;

    if (!s)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        s[i] = ids[i];
        len += strlen(ids[i]) + 1;
    }
    qsort(s, n, sizeof *s, cmp_str);
    out = malloc(len);
    if (out) {
        out[0] = '\0';
        for (size_t i = 0; i < n; i++) {
            strcat(out, s[i]);
            if (i + 1 < n)
                strcat(out, ",");
        }
    }
    free(s);
    return out;
}

/* ---- gRPC handlers -------------------------------------------------------- */

static void pack_into(struct dp_grpc_reply *out, size_t len, void (*pack)(const void *, uint8_t *),
                      const void *msg)
{
    out->buf = malloc(len ? len : 1);
    if (!out->buf) {
        dp_grpc_fail(out, DP_GRPC_INTERNAL, "out of memory");
        return;
    }
    pack(msg, out->buf);
    out->len = len;
}

static void pack_options(const void *m, uint8_t *b)
{
    v1beta1__device_plugin_options__pack(m, b);
}

static void h_options(void *ud, const uint8_t *req, size_t len, struct dp_grpc_reply *out)
{
    struct server *s = ud;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;

    (void)req;
    (void)len;
    o.pre_start_required = s->p->cfg.api != NULL;
    o.get_preferred_allocation_available = 1;
    pack_into(out, v1beta1__device_plugin_options__get_packed_size(&o), pack_options, &o);
}

static void h_list_and_watch(void *ud, struct dp_grpc_reply *out)
{
    struct server *s = ud;
    struct dp_plugin *p = s->p;
    struct gs_err e = GS_ERR_INIT;
    static const struct dp_resource empty;

    pthread_mutex_lock(&p->mu);
    const struct dp_resource *r = find_res(p, s->name);
    /* A resource that vanished (MIG reconfigured) is sent as an empty list
     * until the control loop takes its server down. */
    if (dp_devices_pack_list(r ? r : &empty, &p->inv, &out->buf, &out->len, &e) != 0)
        dp_grpc_fail(out, DP_GRPC_INTERNAL, "%s", e.msg);
    pthread_mutex_unlock(&p->mu);
}

static void pack_pref(const void *m, uint8_t *b)
{
    v1beta1__preferred_allocation_response__pack(m, b);
}

static void h_preferred(void *ud, const uint8_t *req, size_t len, struct dp_grpc_reply *out)
{
    struct server *s = ud;
    struct dp_plugin *p = s->p;
    struct gs_err e = GS_ERR_INIT;
    V1beta1__PreferredAllocationRequest *rq =
        v1beta1__preferred_allocation_request__unpack(NULL, len, req);

    if (!rq) {
        dp_grpc_fail(out, DP_GRPC_INVALID_ARGUMENT, "cannot parse PreferredAllocationRequest");
        return;
    }
    size_t n = rq->n_container_requests;
    V1beta1__PreferredAllocationResponse resp = V1BETA1__PREFERRED_ALLOCATION_RESPONSE__INIT;
    V1beta1__ContainerPreferredAllocationResponse *cr = calloc(n + 1, sizeof *cr);
    V1beta1__ContainerPreferredAllocationResponse **crp = calloc(n + 1, sizeof *crp);
    const char **ids = calloc(n * DP_MAX_DEVICES + 1, sizeof *ids);
    int rc = 0;

    if (!cr || !crp || !ids) {
        dp_grpc_fail(out, DP_GRPC_INTERNAL, "out of memory");
        goto done;
    }
    pthread_mutex_lock(&p->mu);
    const struct dp_resource *r = find_res(p, s->name);
    for (size_t i = 0; i < n && !rc; i++) {
        V1beta1__ContainerPreferredAllocationRequest *c = rq->container_requests[i];
        const char **mine = ids + i * DP_MAX_DEVICES;
        v1beta1__container_preferred_allocation_response__init(&cr[i]);
        crp[i] = &cr[i];
        if (!r) {
            rc = gs_errf(&e, GS_ENOENT, "resource %s is no longer served", s->name);
            break;
        }
        rc = dp_devices_prefer(r, &p->inv, c->available_deviceids, c->n_available_deviceids,
                               c->must_include_deviceids, c->n_must_include_deviceids,
                               c->allocation_size, mine, &e);
        if (rc)
            gs_err_prefix(&e, "container_requests[%zu]", i);
        cr[i].n_deviceids = rc ? 0 : (size_t)c->allocation_size;
        cr[i].deviceids = (char **)mine;
    }
    if (rc) {
        pthread_mutex_unlock(&p->mu);
        dp_grpc_fail(out, rc == -GS_ENOENT ? DP_GRPC_NOT_FOUND : DP_GRPC_INVALID_ARGUMENT, "%s",
                     e.msg);
        goto done;
    }
    resp.n_container_responses = n;
    resp.container_responses = crp;
    pack_into(out, v1beta1__preferred_allocation_response__get_packed_size(&resp), pack_pref,
              &resp);
    pthread_mutex_unlock(&p->mu);
done:
    free(cr);
    free(crp);
    free(ids);
    v1beta1__preferred_allocation_request__free_unpacked(rq, NULL);
}

/* The containers of this resource that already hold devices: our claims
 * (both key forms) and, when kubelet answers, its pod-resources. */
static int collect_claimed(struct dp_plugin *p, const char *resource, char ***out, int *n)
{
    struct dp_podres pr = {0, NULL};
    struct gs_err e = GS_ERR_INIT;
    int cap;

    if (dp_podres_list(p->cfg.podres_socket, resource, PODRES_TIMEOUT_MS, &pr, &e) != 0)
        log_debug("dp", "pod-resources not used: %s", e.msg);
    pthread_mutex_lock(&p->mu);
    cap = 2 * p->n_claims + pr.n + 1;
    *out = calloc((size_t)cap, sizeof **out);
    *n = 0;
    /* Our own record by pod UID: a pod re-created under the same name
     * (a StatefulSet's) is a new pod. */
    for (int i = 0; *out && i < p->n_claims; i++)
        if (strcmp(p->claims[i].resource, resource) == 0)
            (*out)[(*n)++] = strdup(p->claims[i].uid_key);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; *out && i < pr.n; i++)
        (*out)[(*n)++] = strdup(pr.e[i].key);
    dp_podres_clear(&pr);
    if (!*out)
        return -1;
    for (int i = 0; i < *n; i++)
        if (!(*out)[i])
            return -1;
    return 0;
}

static void free_strs(char **s, int n)
{
    for (int i = 0; i < n; i++)
        free(s[i]);
    free(s);
}

static void add_claim_locked(struct dp_plugin *p, const struct dp_assign *a, const char *resource,
                             char *ids)
{
    int64_t t = now_ms();
    int keep = 0;

    for (int i = 0; i < p->n_claims; i++) {
        if (t - p->claims[i].at_ms > CLAIM_TTL_MS || (p->n_claims >= MAX_CLAIMS && i == 0)) {
            free(p->claims[i].ids);
            continue;
        }
        p->claims[keep++] = p->claims[i];
    }
    p->n_claims = keep;
    struct claim *n = realloc(p->claims, (size_t)(p->n_claims + 1) * sizeof *n);
    if (!n) {
        free(ids);
        return;
    }
    p->claims = n;
    struct claim *c = &p->claims[p->n_claims++];
    memset(c, 0, sizeof *c);
    dp_assign_key(a, c->key, sizeof c->key);
    dp_assign_uid_key(a, c->uid_key, sizeof c->uid_key);
    snprintf(c->resource, sizeof c->resource, "%s", resource);
    c->ids = ids;
    c->at_ms = t;
}

static int claimed_locked(const struct dp_plugin *p, const struct dp_assign *a)
{
    char key[DP_KEY_MAX];

    dp_assign_uid_key(a, key, sizeof key);
    for (int i = 0; i < p->n_claims; i++)
        if (strcmp(p->claims[i].uid_key, key) == 0)
            return 1;
    return 0;
}

/* Finds and claims the container kubelet is admitting. */
static int assign_from_api(struct server *s, char *const *ids, size_t n_ids, struct dp_assign *a,
                           struct gs_err *e)
{
    struct dp_plugin *p = s->p;
    json_t *pods = NULL;
    char **claimed = NULL;
    int n_claimed = 0, rc;

    if (collect_claimed(p, s->name, &claimed, &n_claimed) != 0) {
        free_strs(claimed, n_claimed);
        return gs_errf(e, GS_ENOMEM, "out of memory");
    }
    rc = p->cfg.api->list_pods(p->cfg.api->ud, &pods, e);
    /* Each round either claims a container or learns one more claimed, so
     * this ends. */
    while (rc == 0) {
        rc = dp_alloc_match(pods, p->cfg.node_name, s->name, p->cfg.alloc.annot_prefix,
                            (int)n_ids, claimed, n_claimed, a, e);
        if (rc)
            break;
        pthread_mutex_lock(&p->mu);
        if (!claimed_locked(p, a)) {
            for (int i = 0; i < a->n && rc == 0; i++) {
                const struct dp_gpu *g = dp_inventory_find(&p->inv, a->uuids[i]);
                if (!g)
                    rc = gs_errf(e, GS_ENOENT, "pod %s/%s: assigned GPU %s is not on node %s",
                                 a->ns, a->pod, a->uuids[i], p->cfg.node_name);
                else if (!g->healthy)
                    rc = gs_errf(e, GS_ECONFLICT, "pod %s/%s: assigned GPU %s is unhealthy: %s",
                                 a->ns, a->pod, a->uuids[i], g->reason);
            }
            if (rc == 0)
                add_claim_locked(p, a, s->name, ids_key(ids, n_ids));
            pthread_mutex_unlock(&p->mu);
            break;
        }
        pthread_mutex_unlock(&p->mu);
        /* Another Allocate claimed it meanwhile: look again without it. */
        char **more = realloc(claimed, (size_t)(n_claimed + 1) * sizeof *more);
        if (!more) {
            rc = gs_errf(e, GS_ENOMEM, "out of memory");
            break;
        }
        claimed = more;
        char key[DP_KEY_MAX];
        dp_assign_uid_key(a, key, sizeof key);
        if (!(claimed[n_claimed] = strdup(key))) {
            rc = gs_errf(e, GS_ENOMEM, "out of memory");
            break;
        }
        n_claimed++;
    }
    json_decref(pods);
    free_strs(claimed, n_claimed);
    return rc;
}

/* Without an API server: the GPUs behind the IDs kubelet chose. */
static int assign_from_ids(struct server *s, char *const *ids, size_t n_ids, struct dp_assign *a,
                           struct gs_err *e)
{
    struct dp_plugin *p = s->p;
    int rc = 0;

    memset(a, 0, sizeof *a);
    snprintf(a->kind, sizeof a->kind, "whole");
    pthread_mutex_lock(&p->mu);
    const struct dp_resource *r = find_res(p, s->name);
    for (size_t i = 0; i < n_ids && !rc; i++) {
        const struct dp_device *d = r ? dp_devices_find(r, ids[i]) : NULL;
        if (!d) {
            rc = gs_errf(e, GS_ENOENT, "devices_ids[%zu]: unknown device '%.64s' for %s", i, ids[i],
                         s->name);
            break;
        }
        const struct dp_gpu *g = &p->inv.gpu[d->gpu];
        const char *uuid = d->mig >= 0 ? g->mig[d->mig].uuid : g->uuid;
        int dup = 0;
        for (int k = 0; k < a->n; k++)
            dup |= strcmp(a->uuids[k], uuid) == 0;
        if (!dup && a->n < DP_MAX_GPUS)
            snprintf(a->uuids[a->n++], sizeof a->uuids[0], "%s", uuid);
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static void h_allocate(void *ud, const uint8_t *req, size_t len, struct dp_grpc_reply *out)
{
    struct server *s = ud;
    struct dp_plugin *p = s->p;
    struct gs_err e = GS_ERR_INIT;
    V1beta1__AllocateRequest *rq = v1beta1__allocate_request__unpack(NULL, len, req);
    struct dp_assign *a = NULL;
    int rc = 0, status = DP_GRPC_INVALID_ARGUMENT;

    if (!rq) {
        dp_grpc_fail(out, DP_GRPC_INVALID_ARGUMENT, "cannot parse AllocateRequest");
        goto count;
    }
    size_t n = rq->n_container_requests;
    if (n == 0 || n > 64) {
        dp_grpc_fail(out, DP_GRPC_INVALID_ARGUMENT,
                     "AllocateRequest: %zu container_requests (want 1..64)", n);
        goto done;
    }
    a = calloc(n, sizeof *a);
    if (!a) {
        dp_grpc_fail(out, DP_GRPC_INTERNAL, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < n && !rc; i++) {
        V1beta1__ContainerAllocateRequest *c = rq->container_requests[i];
        if (c->n_devices_ids == 0 || c->n_devices_ids > DP_MAX_DEVICES) {
            rc = gs_errf(&e, GS_EINVAL, "container_requests[%zu]: %zu device IDs", i,
                         c->n_devices_ids);
            break;
        }
        /* Every ID must be one we advertise, whichever way we answer. */
        struct dp_assign by_ids;
        rc = assign_from_ids(s, c->devices_ids, c->n_devices_ids, &by_ids, &e);
        if (rc)
            break;
        if (p->cfg.api) {
            rc = assign_from_api(s, c->devices_ids, c->n_devices_ids, &a[i], &e);
            /* The API server or kubelet not answering is worth a retry;
             * anything else is about the pod and needs a person. */
            status = rc == -GS_EUNAVAIL || rc == -GS_EIO || rc == -GS_EPROTO
                         ? DP_GRPC_UNAVAILABLE
                         : DP_GRPC_FAILED_PRECONDITION;
        } else {
            a[i] = by_ids;
        }
        if (rc)
            gs_err_prefix(&e, "container_requests[%zu]", i);
    }
    if (rc) {
        dp_grpc_fail(out, status, "%s", e.msg);
        goto done;
    }
    pthread_mutex_lock(&p->mu);
    rc = dp_alloc_pack(&p->inv, a, (int)n, &p->cfg.alloc, &out->buf, &out->len, &e);
    pthread_mutex_unlock(&p->mu);
    if (rc) {
        dp_grpc_fail(out, DP_GRPC_FAILED_PRECONDITION, "%s", e.msg);
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        log_info("dp", "allocate %s: %s%s%s -> %s%s", s->name, a[i].ns, a[i].pod[0] ? "/" : "",
                 a[i].pod[0] ? a[i].pod : "(no API server)", a[i].uuids[0],
                 a[i].n > 1 ? ",..." : "");
done:
    free(a);
    v1beta1__allocate_request__free_unpacked(rq, NULL);
count:
    pthread_mutex_lock(&p->mu);
    if (out->status == DP_GRPC_OK)
        p->n_alloc++;
    else
        p->n_alloc_err++;
    pthread_mutex_unlock(&p->mu);
    if (out->status != DP_GRPC_OK)
        log_warn("dp", "allocate %s refused: %s", s->name, out->msg);
}

static void h_prestart(void *ud, const uint8_t *req, size_t len, struct dp_grpc_reply *out)
{
    struct server *s = ud;
    struct dp_plugin *p = s->p;
    struct gs_err e = GS_ERR_INIT;
    V1beta1__PreStartContainerRequest *rq =
        v1beta1__pre_start_container_request__unpack(NULL, len, req);
    char assumed[DP_KEY_MAX] = "";
    char *key = NULL;

    if (!rq) {
        dp_grpc_fail(out, DP_GRPC_INVALID_ARGUMENT, "cannot parse PreStartContainerRequest");
        return;
    }
    if (!p->cfg.api || rq->n_devices_ids == 0)
        goto ok;
    key = ids_key(rq->devices_ids, rq->n_devices_ids);
    pthread_mutex_lock(&p->mu);
    for (int i = p->n_claims - 1; key && i >= 0; i--)
        if (strcmp(p->claims[i].resource, s->name) == 0 && strcmp(p->claims[i].ids, key) == 0) {
            snprintf(assumed, sizeof assumed, "%s", p->claims[i].key);
            break;
        }
    pthread_mutex_unlock(&p->mu);
    if (!assumed[0]) {
        /* Allocated before this plugin started: nothing of ours to check. */
        log_debug("dp", "prestart %s: no Allocate of ours for %s", s->name, key ? key : "?");
        goto ok;
    }
    struct dp_podres pr = {0, NULL};
    if (dp_podres_list(p->cfg.podres_socket, s->name, PODRES_TIMEOUT_MS, &pr, &e) != 0) {
        log_warn("dp", "prestart %s: cannot confirm %s: %s", s->name, assumed, e.msg);
        goto ok;
    }
    const struct dp_podres_entry *x = dp_podres_find_ids(&pr, rq->devices_ids,
                                                         (int)rq->n_devices_ids);
    if (x && strcmp(x->key, assumed) != 0) {
        dp_grpc_fail(out, DP_GRPC_FAILED_PRECONDITION,
                     "devices %s went to %s, but Allocate gave them the GPUs assigned to %s; "
                     "refusing to start it with another pod's GPUs (delete the pod to retry)",
                     key, x->key, assumed);
        pthread_mutex_lock(&p->mu);
        p->n_prestart_err++;
        pthread_mutex_unlock(&p->mu);
        log_warn("dp", "prestart %s refused: %s", s->name, out->msg);
    } else if (!x) {
        log_warn("dp", "prestart %s: pod-resources does not list devices %s yet", s->name, key);
    }
    dp_podres_clear(&pr);
    if (out->status != DP_GRPC_OK)
        goto done;
ok:
    out->buf = NULL;
    out->len = 0; /* PreStartContainerResponse has no fields */
done:
    free(key);
    v1beta1__pre_start_container_request__free_unpacked(rq, NULL);
}

static const struct dp_grpc_method methods[] = {
    {"/v1beta1.DevicePlugin/GetDevicePluginOptions", h_options, NULL},
    {"/v1beta1.DevicePlugin/ListAndWatch", NULL, h_list_and_watch},
    {"/v1beta1.DevicePlugin/GetPreferredAllocation", h_preferred, NULL},
    {"/v1beta1.DevicePlugin/Allocate", h_allocate, NULL},
    {"/v1beta1.DevicePlugin/PreStartContainer", h_prestart, NULL},
    {NULL, NULL, NULL},
};

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
    for (int i = 0; i < n; i++) {
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
        struct server *s = &p->srv[i];
        struct gs_err e = GS_ERR_INIT;
        s->p = p;
        s->registered = 0;
        snprintf(s->name, sizeof s->name, "%.63s", names[i]);
        dp_devices_socket_name(s->name, s->endpoint, sizeof s->endpoint);
        snprintf(s->sock, sizeof s->sock, "%s/%s", p->cfg.kubelet_dir, s->endpoint);
        if (dp_grpc_server_start(s->sock, methods, s, &s->srv, &e) != 0)
            log_error("dp", "%s: %s", s->name, e.msg);
        else
            log_info("dp", "serving %s on %s", s->name, s->sock);
    }
    pthread_mutex_unlock(&p->srv_mu);
}

static int register_one(struct dp_plugin *p, struct server *s, struct gs_err *e)
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
        struct server *s = &p->srv[i];
        struct gs_err e = GS_ERR_INIT;
        if (s->registered || !s->srv)
            continue;
        if (register_one(p, s, &e) == 0) {
            s->registered = 1;
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
            if (now_ms() - last_err_log > 60000) {
                log_error("dp", "health events: %s", e.msg);
                last_err_log = now_ms();
            }
            struct timespec ts = {0, 200 * 1000000L};
            nanosleep(&ts, NULL);
        }
        pthread_mutex_lock(&p->mu);
        if (rc == 1) {
            enum dp_xid_class k = dp_health_classify(&p->cfg.health, ev.xid);
            changed |= dp_health_event(&p->cfg.health, &p->inv, &p->hs, &ev, now_ms());
            /* A failing event source repeats at once: say it when it
             * changes something, and do not spin on it. */
            if (!ev.all || changed)
                log_info("dp", "health event on %s: XID %llu (%s)%s%s",
                         ev.all ? "all GPUs" : ev.uuid, (unsigned long long)ev.xid,
                         dp_xid_class_name(k), e.msg[0] ? ": " : "", e.msg);
        } else if (rc == 2) {
            rediscover_locked(p);
            changed = 1;
        }
        changed |= dp_health_reprobe(&p->cfg.health, &p->inv, &p->hs, p->b, now_ms()) > 0;
        if (changed)
            p->publish_needed = 1;
        restart = p->restart_needed;
        pthread_mutex_unlock(&p->mu);
        if (changed)
            notify_all(p);
        if (changed || restart)
            wake(p);
        if (rc == 1 && ev.all) {
            struct timespec ts = {1, 0};
            nanosleep(&ts, NULL);
        }
    }
    return NULL;
}

/* ---- control loop --------------------------------------------------------- */

static void publish(struct dp_plugin *p)
{
    struct gs_err e = GS_ERR_INIT;
    struct dp_inventory *inv = malloc(sizeof *inv);

    if (!inv)
        return;
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
    }
    free(inv);
}

/* Reads inotify events; returns 1 when kubelet restarted (kubelet.sock
 * created) or one of our sockets was removed. */
static int kubelet_restarted(struct dp_plugin *p, int fd)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    int hit = 0;
    ssize_t n;

    while ((n = read(fd, buf, sizeof buf)) > 0) {
        for (char *q = buf; q < buf + n;) {
            struct inotify_event *ev = (struct inotify_event *)q;
            q += sizeof *ev + ev->len;
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

int dp_plugin_run(struct dp_plugin *p, volatile sig_atomic_t *stop, struct gs_err *e)
{
    struct stat st;
    int64_t next_register = 0, backoff = 100, next_publish = 0;
    int quiet = 0;

    if (stat(p->cfg.kubelet_dir, &st) != 0 || !S_ISDIR(st.st_mode))
        return gs_errf(e, GS_ENOENT, "--kubelet-dir %s: not a directory", p->cfg.kubelet_dir);
    int ino = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (ino < 0)
        return gs_errf(e, GS_EIO, "inotify_init1: %s", strerror(errno));
    if (inotify_add_watch(ino, p->cfg.kubelet_dir, IN_CREATE | IN_DELETE | IN_MOVED_TO |
                                                        IN_MOVED_FROM) < 0) {
        int rc = gs_errf(e, GS_EIO, "inotify on %s: %s", p->cfg.kubelet_dir, strerror(errno));
        close(ino);
        return rc;
    }
    p->stopping = 0;
    if (pthread_create(&p->health, NULL, health_thread, p) != 0) {
        close(ino);
        return gs_errf(e, GS_ENOMEM, "cannot start the health thread");
    }
    start_servers(p);

    while (!*stop) {
        struct pollfd fds[2] = {{ino, POLLIN, 0}, {p->wake_fd, POLLIN, 0}};
        int64_t t = now_ms();
        int restart = 0;

        if (poll(fds, 2, 100) > 0) {
            if (fds[0].revents & POLLIN)
                restart = kubelet_restarted(p, ino);
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
        int pub = p->publish_needed;
        pthread_mutex_unlock(&p->mu);
        if (restart) {
            stop_servers(p);
            start_servers(p);
            next_register = 0;
            backoff = 100;
            quiet = 0;
        }
        t = now_ms();
        if (t >= next_register) {
            int left = 0;
            for (int i = 0; i < p->n_srv; i++)
                left += !p->srv[i].registered && p->srv[i].srv;
            if (left && register_all(p, &quiet)) {
                next_register = t + backoff;
                backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
            } else {
                next_register = t + 1000;
            }
        }
        if (p->cfg.api && (pub || t >= next_publish)) {
            publish(p);
            next_publish = t + (int64_t)p->cfg.publish_interval_s * 1000;
        }
    }
    log_info("dp", "stopping");
    p->stopping = 1;
    pthread_join(p->health, NULL);
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
    fprintf(f, "# HELP gpusched_dp_gpu_xid_events_total Health events counted per GPU.\n"
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
    fclose(f);
    return buf;
}
