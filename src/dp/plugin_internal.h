/*
 * dp/plugin_internal.h - the device plugin's shared state, for its two
 * halves: dp/plugin.c (servers, registration, health thread, control loop,
 * metrics) and dp/service.c (the DevicePlugin RPCs kubelet calls).
 *
 * Locks: p->srv_mu (server pointers) is taken before any gRPC server's own
 * lock, and p->mu (inventory, health, resources, claims, counters) is
 * always taken last: stream callbacks run under a server's lock and take
 * p->mu. Nothing else includes this header.
 */
#ifndef GPUSCHED_DP_PLUGIN_INTERNAL_H
#define GPUSCHED_DP_PLUGIN_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <sys/types.h>

#include "dp/grpc.h"
#include "dp/plugin.h"
#include "util/worker.h"

struct dp_server {
    struct dp_plugin *p;
    char name[DP_RESOURCE_MAX];
    char endpoint[96];          /* socket file name */
    char sock[PATH_MAX];
    struct dp_grpc_server *srv; /* guarded by p->srv_mu */
    int registered;             /* control thread only */
    int64_t nostream_since;     /* ms since registered without a ListAndWatch stream; 0 */
    int start_failed;           /* the last start failed (said once); control thread */
    atomic_llong down_since;    /* ms since it has not been served and registered; 0 */
    ino_t kubelet_ino;          /* the kubelet.sock it registered through */
    atomic_int closing;         /* set for every server before any is stopped, cleared when
                                   it serves again: a waiting Allocate answers now */
};

/* A container this plugin answered Allocate for. */
struct dp_claim {
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
    struct dp_claim *claims;
    int n_claims;
    uint64_t n_alloc, n_alloc_err, n_prestart_err, n_register, n_register_err, n_publish_err;

    pthread_mutex_t srv_mu;     /* the server pointers; taken before any server's lock */
    int n_srv;
    struct dp_server srv[DP_MAX_RESOURCES];

    int wake_fd;
    struct gs_worker api;       /* publishes and prunes (API calls), off the control loop */
    atomic_int api_wake;        /* set with publish_needed: publish now */
    int api_on;
    pthread_t health;
    pthread_t busy;             /* dp/busy.h's passes, when busy_on */
    int busy_on;
    atomic_int stopping;
    atomic_llong beat_ms;       /* the control loop's last turn (dp_now_ms); 0 before it runs */
};

/* The DevicePlugin service's method table; each server's ud is its
 * struct dp_server. */
extern const struct dp_grpc_method dp_service_methods[];

/* The served resource of that name, or NULL; caller holds p->mu. */
const struct dp_resource *dp_plugin_find_res(const struct dp_plugin *p, const char *name);

/* Milliseconds on the monotonic clock (util/clock.h), for health and
 * stats timing. */
int64_t dp_now_ms(void);

#endif
