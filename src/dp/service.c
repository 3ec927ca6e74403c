/*
 * dp/service.c - the DevicePlugin RPCs: what kubelet asks and what it gets.
 *
 * GetDevicePluginOptions, ListAndWatch (the device list of one resource),
 * GetPreferredAllocation (dp/devices.c's topology choice), Allocate (the
 * GPUs behind kubelet's IDs, or with an API server the GPUs the extender
 * assigned: dp/alloc.c) and PreStartContainer (checks through kubelet's
 * pod-resources API that the devices went to the pod Allocate assumed).
 * Allocate remembers what it answered as claims, keyed by pod UID, so that
 * concurrent and later Allocates skip containers already served; only that
 * bookkeeping is done under the plugin's lock, never the API calls.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "deviceplugin.pb-c.h"
#include "dp/plugin_internal.h"
#include "dp/podres.h"
#include "util/clock.h"
#include "util/log.h"

#define MAX_CLAIMS 4096
#define CLAIM_TTL_MS (24LL * 3600 * 1000)
#define PODRES_TIMEOUT_MS 5000

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
    struct dp_server *s = ud;
    V1beta1__DevicePluginOptions o = V1BETA1__DEVICE_PLUGIN_OPTIONS__INIT;

    (void)req;
    (void)len;
    o.pre_start_required = s->p->cfg.api != NULL;
    o.get_preferred_allocation_available = 1;
    pack_into(out, v1beta1__device_plugin_options__get_packed_size(&o), pack_options, &o);
}

static void h_list_and_watch(void *ud, struct dp_grpc_reply *out)
{
    struct dp_server *s = ud;
    struct dp_plugin *p = s->p;
    struct gs_err e = GS_ERR_INIT;
    static const struct dp_resource empty;

    pthread_mutex_lock(&p->mu);
    const struct dp_resource *r = dp_plugin_find_res(p, s->name);
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

static int prefer_assigned(struct dp_server *s, const V1beta1__ContainerPreferredAllocationRequest *c,
                           const char **mine);

static void h_preferred(void *ud, const uint8_t *req, size_t len, struct dp_grpc_reply *out)
{
    struct dp_server *s = ud;
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
    /* with an API server, the IDs of the GPUs the extender assigned the
     * container about to be admitted, so that what kubelet records (its
     * PodResources, read by dcgm-exporter, and its Topology Manager) is what
     * the container gets; the topology choice when that cannot be told */
    int assigned = p->cfg.api && n == 1 &&
                   prefer_assigned(s, rq->container_requests[0], ids) == 0;
    pthread_mutex_lock(&p->mu);
    const struct dp_resource *r = dp_plugin_find_res(p, s->name);
    for (size_t i = 0; i < n && !rc; i++) {
        V1beta1__ContainerPreferredAllocationRequest *c = rq->container_requests[i];
        const char **mine = ids + i * DP_MAX_DEVICES;
        v1beta1__container_preferred_allocation_response__init(&cr[i]);
        crp[i] = &cr[i];
        if (!r) {
            rc = gs_errf(&e, GS_ENOENT, "resource %s is no longer served", s->name);
            break;
        }
        if (!assigned)
            rc = dp_devices_prefer(r, &p->inv, c->available_deviceids, c->n_available_deviceids,
                                   c->must_include_deviceids, c->n_must_include_deviceids,
                                   c->allocation_size, mine, &e);
        if (rc)
            gs_err_prefix(&e, "container_requests[%zu]", i);
        cr[i].n_deviceids = rc ? 0 : (size_t)c->allocation_size;
        cr[i].deviceids = (char **)mine;
    }
    /* a device or resource this plugin no longer serves (its list changed
     * and kubelet's lags): no preference, kubelet chooses. An error would
     * fail the pod's admission, and Allocate refuses what it must */
    if (rc == -GS_ENOENT) {
        log_warn("dp", "preferred allocation %s: %s; leaving the choice to kubelet", s->name,
                 e.msg);
        for (size_t i = 0; i < n; i++) {
            v1beta1__container_preferred_allocation_response__init(&cr[i]);
            crp[i] = &cr[i];
        }
        rc = 0;
    }
    if (rc) {
        pthread_mutex_unlock(&p->mu);
        dp_grpc_fail(out, DP_GRPC_INVALID_ARGUMENT, "%s", e.msg);
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

    static atomic_int warned; /* said once, then at debug level */
    if (dp_podres_list(p->cfg.podres_socket, resource, PODRES_TIMEOUT_MS, &pr, &e) != 0) {
        if (!atomic_exchange(&warned, 1))
            log_warn("dp", "kubelet's PodResources v1 (kubelet 1.20 and later) did not answer: %s; "
                     "the devices containers already hold are known from this plugin's own "
                     "Allocates only (said once)", e.msg);
        else
            log_debug("dp", "pod-resources not used: %s", e.msg);
    }
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
    int64_t t = dp_now_ms();
    int keep = 0;

    for (int i = 0; i < p->n_claims; i++) {
        if (t - p->claims[i].at_ms > CLAIM_TTL_MS || (p->n_claims >= MAX_CLAIMS && i == 0)) {
            free(p->claims[i].ids);
            continue;
        }
        p->claims[keep++] = p->claims[i];
    }
    p->n_claims = keep;
    struct dp_claim *n = realloc(p->claims, (size_t)(p->n_claims + 1) * sizeof *n);
    if (!n) {
        free(ids);
        return;
    }
    p->claims = n;
    struct dp_claim *c = &p->claims[p->n_claims++];
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
static int assign_from_api(struct dp_server *s, char *const *ids, size_t n_ids, struct dp_assign *a,
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
                const char *why;
                if (!dp_inventory_find(&p->inv, a->uuids[i]))
                    rc = gs_errf(e, GS_ENOENT, "pod %s/%s: assigned GPU %s is not on node %s",
                                 a->ns, a->pod, a->uuids[i], p->cfg.node_name);
                else if (!dp_inventory_healthy(&p->inv, a->uuids[i], &why))
                    rc = gs_errf(e, GS_ECONFLICT, "pod %s/%s: assigned GPU %s is unhealthy: %s",
                                 a->ns, a->pod, a->uuids[i], why);
            }
            if (rc == 0) {
                add_claim_locked(p, a, s->name, ids_key(ids, n_ids));
                /* concurrent Allocates for one pod (kubelet sends them one
                 * by one, but be sure): the one that claims its last
                 * container is the last */
                char pre[DP_KEY_MAX];
                int mine = 0;
                snprintf(pre, sizeof pre, "uid:%s/", a->uid);
                for (int i = 0; i < p->n_claims; i++)
                    mine += strcmp(p->claims[i].resource, s->name) == 0 &&
                            strncmp(p->claims[i].uid_key, pre, strlen(pre)) == 0;
                a->last |= mine >= a->n_ctrs;
            }
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

/* The GPU (or MIG instance) UUID behind a device ID ("GPU-1::3" or
 * "GPU-1"), compared over its length. */
static int id_is(const char *id, const char *uuid)
{
    size_t n = strlen(uuid);
    return strncmp(id, uuid, n) == 0 && (id[n] == '\0' || strncmp(id + n, "::", 2) == 0);
}

/* GetPreferredAllocation with an API server: one available ID for each GPU
 * the extender assigned the container kubelet is about to admit (the same
 * match Allocate makes, nothing claimed), the IDs kubelet must include
 * among them. 0 with the IDs in mine, or -1 when that cannot be told. */
static int prefer_assigned(struct dp_server *s, const V1beta1__ContainerPreferredAllocationRequest *c,
                           const char **mine)
{
    struct dp_plugin *p = s->p;
    struct gs_err e = GS_ERR_INIT;
    struct dp_assign a;
    json_t *pods = NULL;
    char **claimed = NULL;
    int n_claimed = 0, rc = -1;
    size_t size = (size_t)c->allocation_size;

    if (size == 0 || size > DP_MAX_DEVICES || size > c->n_available_deviceids)
        return -1;
    if (collect_claimed(p, s->name, &claimed, &n_claimed) == 0 &&
        p->cfg.api->list_pods(p->cfg.api->ud, &pods, &e) == 0 &&
        dp_alloc_match(pods, p->cfg.node_name, s->name, p->cfg.alloc.annot_prefix, (int)size,
                       claimed, n_claimed, &a, &e) == 0 &&
        (size_t)a.n == size) {
        rc = 0;
        for (size_t k = 0; k < size && rc == 0; k++) {
            const char *pick = NULL;
            /* a must-include ID of this GPU first, else any free one */
            for (size_t j = 0; j < c->n_must_include_deviceids && !pick; j++)
                if (id_is(c->must_include_deviceids[j], a.uuids[k]))
                    pick = c->must_include_deviceids[j];
            for (size_t j = 0; j < c->n_available_deviceids && !pick; j++) {
                const char *id = c->available_deviceids[j];
                int taken = 0;
                for (size_t q = 0; q < k; q++)
                    taken |= strcmp(mine[q], id) == 0;
                if (!taken && id_is(id, a.uuids[k]))
                    pick = id;
            }
            if (pick)
                mine[k] = pick;
            else
                rc = -1; /* not among kubelet's: its own choice stands */
        }
        /* every must-include ID must be in the answer */
        for (size_t j = 0; j < c->n_must_include_deviceids && rc == 0; j++) {
            int in = 0;
            for (size_t k = 0; k < size; k++)
                in |= strcmp(mine[k], c->must_include_deviceids[j]) == 0;
            if (!in)
                rc = -1;
        }
    }
    json_decref(pods);
    free_strs(claimed, n_claimed);
    return rc;
}

/* Without an API server: the GPUs behind the IDs kubelet chose. */
static int assign_from_ids(struct dp_server *s, char *const *ids, size_t n_ids, struct dp_assign *a,
                           struct gs_err *e)
{
    struct dp_plugin *p = s->p;
    int rc = 0;

    memset(a, 0, sizeof *a);
    snprintf(a->kind, sizeof a->kind, "whole");
    pthread_mutex_lock(&p->mu);
    const struct dp_resource *r = dp_plugin_find_res(p, s->name);
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

/* An API server or kubelet that did not answer (rather than an answer
 * about the pod). */
static int transient(int rc) { return rc == -GS_EUNAVAIL || rc == -GS_EIO || rc == -GS_EPROTO; }

static void h_allocate(void *ud, const uint8_t *req, size_t len, struct dp_grpc_reply *out)
{
    struct dp_server *s = ud;
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
            /* The API server or kubelet not answering: kubelet never asks
             * again (the pod fails admission for good), so wait for them
             * here, up to api_wait_s. Anything else is about the pod and
             * needs a person. */
            double most = p->cfg.api_wait_s > 0 ? p->cfg.api_wait_s : 20;
            double nap = 0.25, end = gs_mono_s() + most;
            int said = 0;
            /* a deadline, not a count of naps: each try can itself take a
             * request timeout; a server being stopped (plugin stopping,
             * kubelet restarted) answers now, as nobody waits any more */
            while ((rc = assign_from_api(s, c->devices_ids, c->n_devices_ids, &a[i], &e)) &&
                   transient(rc) && !atomic_load(&p->stopping) && !atomic_load(&s->closing)) {
                double left = end - gs_mono_s();
                if (left <= 0)
                    break;
                if (!said++)
                    log_warn("dp", "allocate %s: %s; waiting up to %.0f s", s->name, e.msg, most);
                double t = nap < left ? nap : left;
                nanosleep(&(struct timespec){(time_t)t, (long)((t - (time_t)t) * 1e9)}, NULL);
                nap = nap * 2 > 1 ? 1 : nap * 2;
                e = (struct gs_err)GS_ERR_INIT;
            }
            status = transient(rc) ? DP_GRPC_UNAVAILABLE : DP_GRPC_FAILED_PRECONDITION;
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
    /* the pod's last GPU container is served: tell the extender, which then
     * binds the node's next GPU pod (docs/design.md, "One pending GPU pod
     * per node"); if this fails it learns it from kubelet (startTime) */
    for (size_t i = 0; p->cfg.api && p->cfg.api->mark_allocated && i < n; i++) {
        struct gs_err me = GS_ERR_INIT;
        if (a[i].last && a[i].pod[0] &&
            p->cfg.api->mark_allocated(p->cfg.api->ud, a[i].ns, a[i].pod, a[i].uid, &me) != 0)
            log_warn("dp", "pod %s/%s: cannot mark it allocated: %s", a[i].ns, a[i].pod, me.msg);
    }
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
    struct dp_server *s = ud;
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
        if (p->claims[i].ids && strcmp(p->claims[i].resource, s->name) == 0 &&
            strcmp(p->claims[i].ids, key) == 0) { /* ids: NULL when out of memory */
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

const struct dp_grpc_method dp_service_methods[] = {
    {"/v1beta1.DevicePlugin/GetDevicePluginOptions", h_options, NULL},
    {"/v1beta1.DevicePlugin/ListAndWatch", NULL, h_list_and_watch},
    {"/v1beta1.DevicePlugin/GetPreferredAllocation", h_preferred, NULL},
    {"/v1beta1.DevicePlugin/Allocate", h_allocate, NULL},
    {"/v1beta1.DevicePlugin/PreStartContainer", h_prestart, NULL},
    {NULL, NULL, NULL},
};
