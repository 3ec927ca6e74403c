/*
 * dp/plugin.h - the device plugin: kubelet's side of the node's GPUs.
 *
 * Ties the parts together: the backend's inventory (dp/gpu.h) and its
 * health (dp/health.h) under one lock; one gRPC server per resource
 * (dp/devices.h) on <kubelet-dir>/gpusched-<name>.sock, registered with
 * kubelet.sock; ListAndWatch pushes the full list again on every health or
 * inventory change; Allocate answers with the GPUs the extender assigned
 * (dp/alloc.h) or, without an API server, with the GPUs of the IDs kubelet
 * chose; PreStartContainer checks through kubelet's pod-resources API
 * (dp/podres.h) that the devices went to the pod Allocate assumed.
 *
 * Threads: dp_plugin_run() runs the control loop on the caller's thread
 * (inotify on the kubelet dir: re-register when kubelet.sock is created or
 * our socket deleted; registration retries; periodic inventory publishing),
 * plus a health thread waiting on backend events, plus grpc's threads.
 * Concurrent Allocates do not wait for each other: the API server and
 * pod-resources are asked outside the lock, and only the claim of a
 * container is made under it.
 *
 * Ownership: dp_plugin_new() takes the backend (closed by dp_plugin_free());
 * the API hooks' ud stays the caller's.
 */
#ifndef GPUSCHED_DP_PLUGIN_H
#define GPUSCHED_DP_PLUGIN_H

#include <jansson.h>
#include <signal.h>

#include "dp/alloc.h"
#include "dp/devices.h"
#include "dp/gpu.h"
#include "dp/health.h"

/* What the plugin needs from the API server (dp/kube.c implements it over
 * the shared Kubernetes client; tests may supply their own). */
struct dp_api {
    void *ud;
    /* Pods on this node: a PodList object or an array; caller decrefs. */
    int (*list_pods)(void *ud, json_t **out, struct gs_err *e);
    /* The same from the API server's cache (resourceVersion=0: may lag by
     * the watch's delay); NULL: list_pods. A read of every pod in etcd on
     * API servers before 1.31, for which a field selector is no help, is
     * kept for what must be current (Allocate). */
    int (*list_pods_cached)(void *ud, json_t **out, struct gs_err *e);
    /* Writes the node annotation and the missing labels. */
    int (*publish)(void *ud, const struct dp_inventory *inv, struct gs_err *e);
    /* Marks pod ns/name (uid) <prefix>allocated-at: its last GPU container's
     * Allocate is answered, so the extender may bind the node's next GPU
     * pod (docs/design.md, "One pending GPU pod per node"). */
    int (*mark_allocated)(void *ud, const char *ns, const char *name, const char *uid,
                          struct gs_err *e);
    /* Writes the node's in-container GPU memory use (dp/limiter.h), a
     * JSON string, as the <prefix>gpu-usage annotation. NULL: not kept. */
    int (*publish_usage)(void *ud, const char *usage_json, struct gs_err *e);
};

struct dp_plugin_cfg {
    const char *kubelet_dir;      /* "/var/lib/kubelet/device-plugins" */
    const char *podres_socket;    /* "/var/lib/kubelet/pod-resources/kubelet.sock" */
    const char *node_name;
    struct dp_devices_cfg devices;
    struct dp_health_cfg health;
    struct dp_alloc_opts alloc;
    const struct dp_api *api;     /* NULL: no API server (NVIDIA's behaviour) */
    int publish_interval_s;       /* refresh of the inventory annotation */
    int api_wait_s;               /* how long Allocate waits for an API server or
                                     kubelet that does not answer; 0 = 20 */
    int healthz_grace_s;          /* how long a resource may go unserved or
                                     unregistered (a kubelet restart) before
                                     dp_plugin_serving says no; 0 = 60 */
    int register_timeout_ms;      /* one Register call, kubelet dial-back included */
};

struct dp_plugin;

int dp_plugin_new(const struct dp_plugin_cfg *cfg, struct dp_backend *b, struct dp_plugin **out,
                  struct gs_err *e);
/* Serves until *stop becomes nonzero (a signal handler sets it). Returns 0,
 * or a negative code when the plugin cannot serve at all. */
int dp_plugin_run(struct dp_plugin *p, volatile sig_atomic_t *stop, struct gs_err *e);
void dp_plugin_free(struct dp_plugin *p);

/* 1 when every resource has been served and registered with kubelet within
 * the last healthz_grace_s; else 0 with the first that has not, and for how
 * long, in why (for /healthz: a DaemonSet pod that cannot serve is
 * restarted). Thread-safe. */
int dp_plugin_serving(struct dp_plugin *p, char *why, size_t cap);

/* Prometheus text for /metrics (malloc'd). */
char *dp_plugin_metrics(struct dp_plugin *p);
/* The inventory annotation as it would be published now. */
json_t *dp_plugin_inventory(struct dp_plugin *p);

#endif
