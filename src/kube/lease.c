/* kube/lease.c - see lease.h. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube/lease.h"
#include "util/clock.h"
#include "util/log.h"
#include "util/worker.h"

struct kube_leader {
    struct kube_client *c;
    struct kube_leader_opts opts;
    char *ns, *name, *identity;
    char coll[600], path[900];
    struct gs_worker wk;
    atomic_int leading;
    atomic_ulong transitions;
    /* what this replica last saw, and when (monotonic) */
    char seen_holder[256], seen_renew[64];
    double seen_at;
    /* monotonic ms of our last successful renew (read by binding threads) */
    atomic_llong last_renew_ok_ms;
    pthread_mutex_t holder_mu; /* guards holder: read by other threads */
    char holder[256];
};

static void set_holder(struct kube_leader *l, const char *who)
{
    pthread_mutex_lock(&l->holder_mu);
    snprintf(l->holder, sizeof l->holder, "%s", who);
    pthread_mutex_unlock(&l->holder_mu);
}

void kube_leader_holder(struct kube_leader *l, char *out, size_t cap)
{
    int stale = !kube_leader_is_leader(l);
    pthread_mutex_lock(&l->holder_mu);
    /* our own lease, not renewed lately: nobody to send work to */
    snprintf(out, cap, "%s", stale && strcmp(l->holder, l->identity) == 0 ? "" : l->holder);
    pthread_mutex_unlock(&l->holder_mu);
}

static void set_leading(struct kube_leader *l, int v)
{
    if (atomic_exchange(&l->leading, v) != v) {
        atomic_fetch_add(&l->transitions, 1);
        log_info("leader", "%s %s lease %s/%s", l->identity, v ? "now holds" : "no longer holds",
                 l->ns, l->name);
        if (l->opts.on_change)
            l->opts.on_change(l->opts.ud, v);
    }
}

static json_t *lease_spec(struct kube_leader *l, const char *holder, long transitions)
{
    char now[40];
    kube_now_micro(now, sizeof now);
    return json_pack("{s:s, s:i, s:s, s:s, s:I}", "holderIdentity", holder,
                     "leaseDurationSeconds", (int)(l->opts.lease_s + 0.999), "acquireTime", now,
                     "renewTime", now, "leaseTransitions", (json_int_t)transitions);
}

static const char *spec_str(const json_t *lease, const char *k)
{
    const json_t *v = json_object_get(json_object_get(lease, "spec"), k);
    return json_is_string(v) ? json_string_value(v) : "";
}

/* One round; after losing the race to create the Lease, once more (again =
 * 1) to learn who won, so a non-leader can forward /bind at once instead of
 * after retry_s. */
static int leader_try(struct kube_leader *l, int again, struct gs_err *e)
{
    json_t *lease = NULL, *spec;
    int rc = kube_get(l->c, l->path, &lease, e);
    double now = gs_mono_s();

    if (rc == -GS_ENOENT) {
        json_decref(lease);
        json_t *obj = json_pack("{s:s, s:s, s:{s:s, s:s}}", "apiVersion", "coordination.k8s.io/v1",
                                "kind", "Lease", "metadata", "name", l->name, "namespace", l->ns);
        json_object_set_new(obj, "spec", lease_spec(l, l->identity, 0));
        rc = kube_create(l->c, l->coll, obj, NULL, e);
        json_decref(obj);
        if (rc == -GS_ECONFLICT) /* someone else created it first */
            return again ? leader_try(l, 0, e) : 0;
        if (rc < 0)
            return rc;
        atomic_store(&l->last_renew_ok_ms, (long long)(now * 1000));
        set_holder(l, l->identity);
        return 1;
    }
    if (rc < 0) {
        json_decref(lease);
        return rc;
    }
    const char *holder = spec_str(lease, "holderIdentity");
    const char *renew = spec_str(lease, "renewTime");
    const json_t *dur = json_object_get(json_object_get(lease, "spec"), "leaseDurationSeconds");
    const json_t *tr = json_object_get(json_object_get(lease, "spec"), "leaseTransitions");
    double duration = json_is_integer(dur) ? (double)json_integer_value(dur) : l->opts.lease_s;
    long transitions = json_is_integer(tr) ? (long)json_integer_value(tr) : 0;
    int mine = strcmp(holder, l->identity) == 0;
    set_holder(l, holder);

    if (strcmp(holder, l->seen_holder) != 0 || strcmp(renew, l->seen_renew) != 0) {
        snprintf(l->seen_holder, sizeof l->seen_holder, "%s", holder);
        snprintf(l->seen_renew, sizeof l->seen_renew, "%s", renew);
        l->seen_at = now;
    }
    if (!mine && *holder && now - l->seen_at < duration) {
        json_decref(lease);
        return 0; /* held by a live leader */
    }
    spec = lease_spec(l, l->identity, mine ? transitions : transitions + 1);
    if (mine) /* keep the original acquireTime */
        json_object_set(spec, "acquireTime",
                        json_object_get(json_object_get(lease, "spec"), "acquireTime"));
    json_object_set_new(lease, "spec", spec);
    rc = kube_replace(l->c, l->path, lease, NULL, e);
    json_decref(lease);
    if (rc == -GS_ECONFLICT)
        return 0; /* lost a race: someone else updated it */
    if (rc < 0)
        return rc;
    atomic_store(&l->last_renew_ok_ms, (long long)(now * 1000));
    set_holder(l, l->identity);
    return 1;
}

int kube_leader_try(struct kube_leader *l, struct gs_err *e)
{
    return leader_try(l, 1, e);
}

/* Whether our last renew is recent enough that no other replica can have
 * taken the lease: it waits a whole lease_s after it last saw the renew,
 * which was written after `now` was taken (leader_try); we stop at 2/3 of
 * it, whatever the election thread is doing (a renew stuck in a slow
 * request included). */
static int renewed_lately(struct kube_leader *l)
{
    double last = (double)atomic_load(&l->last_renew_ok_ms) / 1000;
    return gs_mono_s() - last <= l->opts.lease_s * 2 / 3;
}

static int nap(struct kube_leader *l, double s) { return gs_worker_sleep(&l->wk, s, NULL); }

/* A leader renews every renew_s, counted from the start of the last
 * round (a slow round does not push the next one back), and tries a renew
 * that failed again after retry_s (at most renew_s): one failure no longer
 * leaves it a single try before its deadline (2/3 of lease_s). The others
 * try every retry_s. */
static void *leader_main(void *arg)
{
    struct kube_leader *l = arg;
    double wait;
    do {
        struct gs_err e = GS_ERR_INIT;
        double start = gs_mono_s();
        int rc = kube_leader_try(l, &e);
        if (rc < 0) {
            log_warn("leader", "lease %s/%s: %s", l->ns, l->name, e.msg);
            /* a leader that cannot renew steps down before the lease can
             * expire for the others */
            if (atomic_load(&l->leading) && !renewed_lately(l))
                set_leading(l, 0);
        } else {
            set_leading(l, rc);
        }
        if (!atomic_load(&l->leading))
            wait = l->opts.retry_s;
        else if (rc < 0)
            wait = l->opts.retry_s < l->opts.renew_s ? l->opts.retry_s : l->opts.renew_s;
        else
            wait = l->opts.renew_s - (gs_mono_s() - start);
    } while (!nap(l, wait > 0.05 ? wait : 0.05));
    return NULL;
}

int kube_leader_start(struct kube_client *c, const struct kube_leader_opts *opts,
                      struct kube_leader **out, struct gs_err *e)
{
    struct kube_leader *l;
    if (!opts->name || !*opts->name || !opts->identity || !*opts->identity)
        return gs_errf(e, GS_EINVAL, "leader election needs a lease name and an identity");
    if (!(l = calloc(1, sizeof *l)))
        return gs_errf(e, GS_ENOMEM, "out of memory");
    l->c = c;
    l->opts = *opts;
    pthread_mutex_init(&l->holder_mu, NULL);
    if (l->opts.lease_s <= 0)
        l->opts.lease_s = 15;
    if (l->opts.renew_s <= 0)
        l->opts.renew_s = l->opts.lease_s / 3;
    if (l->opts.retry_s <= 0)
        l->opts.retry_s = 2;
    l->ns = strdup(opts->ns ? opts->ns : kube_client_namespace(c));
    l->name = strdup(opts->name);
    l->identity = strdup(opts->identity);
    snprintf(l->coll, sizeof l->coll, "/apis/coordination.k8s.io/v1/namespaces/%s/leases", l->ns);
    snprintf(l->path, sizeof l->path, "%s/%s", l->coll, l->name);
    l->seen_at = gs_mono_s();
    if (gs_worker_start(&l->wk, leader_main, l) < 0) {
        free(l->ns);
        free(l->name);
        free(l->identity);
        pthread_mutex_destroy(&l->holder_mu);
        free(l);
        return gs_errf(e, GS_ENOMEM, "cannot start the election thread");
    }
    *out = l;
    return 0;
}

int kube_leader_is_leader(struct kube_leader *l)
{
    return l && atomic_load(&l->leading) && renewed_lately(l);
}

unsigned long kube_leader_transitions(struct kube_leader *l)
{
    return l ? atomic_load(&l->transitions) : 0;
}

void kube_leader_stop(struct kube_leader *l)
{
    if (!l)
        return;
    gs_worker_stop(&l->wk);
    gs_worker_destroy(&l->wk);
    if (atomic_load(&l->leading)) {
        struct gs_err e = GS_ERR_INIT;
        json_t *lease = NULL;
        if (kube_get(l->c, l->path, &lease, &e) == 0 &&
            strcmp(spec_str(lease, "holderIdentity"), l->identity) == 0) {
            json_object_set_new(json_object_get(lease, "spec"), "holderIdentity", json_string(""));
            if (kube_replace(l->c, l->path, lease, NULL, &e) < 0)
                log_warn("leader", "releasing lease %s/%s: %s", l->ns, l->name, e.msg);
        }
        json_decref(lease);
        set_leading(l, 0);
    }
    free(l->ns);
    free(l->name);
    free(l->identity);
    pthread_mutex_destroy(&l->holder_mu);
    free(l);
}
