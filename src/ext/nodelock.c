/* ext/nodelock.c - see nodelock.h. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/request.h"
#include "ext/nodelock.h"

struct holder {
    char uid[64], name[2 * CORE_NAME_MAX], node[CORE_NAME_MAX];
    double since;
};

struct waiter {
    char node[CORE_NAME_MAX], uid[64];
    void *token;
    double deadline, started;
    int woken; /* handed back; the entry waits for its reclaim */
};

struct ext_nodelock {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    int stop, running;
    double timeout_s;
    void (*wake)(void *token);
    struct holder *h;
    int nh, caph;
    struct waiter *w;
    int nw, capw;
};

static int grow(void **arr, int *cap, int want, size_t size)
{
    if (want <= *cap)
        return 0;
    int nc = *cap ? *cap * 2 : 16;
    while (nc < want)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * size);
    if (!p)
        return -1;
    *arr = p;
    *cap = nc;
    return 0;
}

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Is node held by a pod other than uid at now? Lock held. */
static const struct holder *holder_of(const struct ext_nodelock *l, const char *node,
                                      const char *uid, double now)
{
    const struct holder *best = NULL;
    for (int i = 0; i < l->nh; i++) {
        const struct holder *h = &l->h[i];
        if (strcmp(h->node, node) != 0 || strcmp(h->uid, uid) == 0 ||
            now - h->since >= l->timeout_s)
            continue;
        if (!best || h->since > best->since)
            best = h;
    }
    return best;
}

/* Hands back every waiter of node (all when node is NULL). Lock held. */
static void wake_node(struct ext_nodelock *l, const char *node)
{
    for (int i = 0; i < l->nw; i++) {
        struct waiter *w = &l->w[i];
        if (!w->woken && (!node || strcmp(w->node, node) == 0)) {
            w->woken = 1;
            l->wake(w->token);
        }
    }
}

static void *run(void *arg)
{
    struct ext_nodelock *l = arg;
    pthread_mutex_lock(&l->mu);
    while (!l->stop) {
        double now = wall(), next = now + 60;
        for (int i = 0; i < l->nw; i++) {
            struct waiter *w = &l->w[i];
            if (w->woken)
                continue;
            const struct holder *h = holder_of(l, w->node, w->uid, now);
            if (w->deadline <= now || !h) {
                w->woken = 1;
                l->wake(w->token);
                continue;
            }
            next = fmin(next, fmin(w->deadline, h->since + l->timeout_s));
        }
        double secs = floor(next);
        struct timespec ts = {(time_t)secs, (long)((next - secs) * 1e9)};
        pthread_cond_timedwait(&l->cv, &l->mu, &ts);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

int ext_nodelock_new(double timeout_s, void (*wake)(void *token), struct ext_nodelock **out,
                     struct gs_err *e)
{
    struct ext_nodelock *l = calloc(1, sizeof *l);
    if (!l)
        return gs_errf(e, GS_ENOMEM, "out of memory");
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    l->timeout_s = timeout_s;
    l->wake = wake;
    if (pthread_create(&l->thread, NULL, run, l) != 0) {
        pthread_cond_destroy(&l->cv);
        pthread_mutex_destroy(&l->mu);
        free(l);
        return gs_errf(e, GS_ENOMEM, "cannot start the node lock thread");
    }
    l->running = 1;
    *out = l;
    return 0;
}

void ext_nodelock_shutdown(struct ext_nodelock *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    wake_node(l, NULL);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (l->running)
        pthread_join(l->thread, NULL);
    l->running = 0;
}

void ext_nodelock_free(struct ext_nodelock *l)
{
    if (!l)
        return;
    ext_nodelock_shutdown(l);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l->h);
    free(l->w);
    free(l);
}

double ext_nodelock_timeout(const struct ext_nodelock *l) { return l->timeout_s; }

/* Removes uid's holder entry; returns its node in buf ("" if none). */
static void drop_locked(struct ext_nodelock *l, const char *uid, char *node, size_t cap)
{
    node[0] = '\0';
    for (int i = 0; i < l->nh; i++)
        if (strcmp(l->h[i].uid, uid) == 0) {
            snprintf(node, cap, "%s", l->h[i].node);
            l->h[i] = l->h[--l->nh];
            return;
        }
}

static void put_locked(struct ext_nodelock *l, const char *uid, const char *name, const char *node,
                       double since)
{
    if (grow((void **)&l->h, &l->caph, l->nh + 1, sizeof *l->h) < 0)
        return; /* out of memory: the node is not held (the plugin then refuses a guess) */
    struct holder *h = &l->h[l->nh++];
    snprintf(h->uid, sizeof h->uid, "%s", uid);
    snprintf(h->name, sizeof h->name, "%s", name ? name : uid);
    snprintf(h->node, sizeof h->node, "%s", node);
    h->since = since;
}

void ext_nodelock_set(struct ext_nodelock *l, const char *uid, const char *name, const char *node,
                      double since)
{
    char was[CORE_NAME_MAX];
    pthread_mutex_lock(&l->mu);
    drop_locked(l, uid, was, sizeof was);
    put_locked(l, uid, name, node, since);
    if (was[0] && strcmp(was, node) != 0)
        wake_node(l, was);
    pthread_cond_broadcast(&l->cv); /* the thread's next stale time may move */
    pthread_mutex_unlock(&l->mu);
}

int ext_nodelock_clear(struct ext_nodelock *l, const char *uid)
{
    char was[CORE_NAME_MAX];
    pthread_mutex_lock(&l->mu);
    drop_locked(l, uid, was, sizeof was);
    if (was[0])
        wake_node(l, was);
    pthread_mutex_unlock(&l->mu);
    return was[0] != '\0';
}

int ext_nodelock_take(struct ext_nodelock *l, const char *node, const char *uid,
                      const char *name, double now, char *why, size_t cap)
{
    char was[CORE_NAME_MAX];
    pthread_mutex_lock(&l->mu);
    const struct holder *h = holder_of(l, node, uid, now);
    if (h) {
        snprintf(why, cap, "node %s: GPU pod %s, bound %.1f s ago, is not yet admitted by "
                 "kubelet (one pending GPU pod per node)", node, h->name, now - h->since);
        pthread_mutex_unlock(&l->mu);
        return 1;
    }
    drop_locked(l, uid, was, sizeof was);
    put_locked(l, uid, name, node, now);
    pthread_mutex_unlock(&l->mu);
    return 0;
}

int ext_nodelock_held(struct ext_nodelock *l, const char *node, const char *uid, double now)
{
    pthread_mutex_lock(&l->mu);
    int held = holder_of(l, node, uid, now) != NULL;
    pthread_mutex_unlock(&l->mu);
    return held;
}

int ext_nodelock_count(struct ext_nodelock *l, double now)
{
    int n = 0;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->nh; i++)
        n += now - l->h[i].since < l->timeout_s;
    pthread_mutex_unlock(&l->mu);
    return n;
}

int ext_nodelock_wait(struct ext_nodelock *l, const char *node, const char *uid, void *token,
                      double deadline, double started, double now)
{
    int rc = 1;
    pthread_mutex_lock(&l->mu);
    if (l->stop || grow((void **)&l->w, &l->capw, l->nw + 1, sizeof *l->w) < 0) {
        rc = -1;
    } else if (!holder_of(l, node, uid, now)) {
        rc = 0; /* released while the bind was answering: no wake would come */
    } else {
        struct waiter *w = &l->w[l->nw++];
        memset(w, 0, sizeof *w);
        snprintf(w->node, sizeof w->node, "%s", node);
        snprintf(w->uid, sizeof w->uid, "%s", uid);
        w->token = token;
        w->deadline = deadline;
        w->started = started;
        pthread_cond_broadcast(&l->cv);
    }
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int ext_nodelock_reclaim(struct ext_nodelock *l, void *token, double *deadline, double *started)
{
    int found = 0;
    pthread_mutex_lock(&l->mu);
    for (int i = 0; i < l->nw; i++)
        if (l->w[i].token == token) {
            *deadline = l->w[i].deadline;
            *started = l->w[i].started;
            l->w[i] = l->w[--l->nw];
            found = 1;
            break;
        }
    pthread_mutex_unlock(&l->mu);
    return found;
}
