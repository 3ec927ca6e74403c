/*
 * wh/wh_server.h - the admission webhook service: HTTPS routes, quotas from
 * a file, certificate reload, metrics.
 *
 * Routes: POST /validate and /mutate (AdmissionReview v1), GET /healthz and
 * /metrics. Pods are judged by wh_admit; GPUQuota objects posted to
 * /validate are refused when core_quota_parse() finds them broken, so a
 * misspelt quota never reaches the cluster. A body that is not an
 * AdmissionReview gets 400 with the reason; the server keeps serving.
 *
 * Quotas come from a file or, in a cluster, from a watch of GPUQuota
 * objects (ext/quotas.h: re-read on change; broken objects are logged,
 * counted in gpusched_quota_objects_broken and ignored). The caller's main
 * loop calls wh_server_tick() about once a second to reload the TLS pair
 * when it changes.
 *
 * Ownership: wh_server_start() returns a server freed by wh_server_stop();
 * the options' strings and client must outlive it.
 */
#ifndef GPUSCHED_WH_SERVER_H
#define GPUSCHED_WH_SERVER_H

#include <stddef.h>

#include "kube/client.h"
#include "util/err.h"
#include "wh/wh_admit.h"

struct wh_server_opts {
    const char *addr;             /* "0.0.0.0" */
    int port;                     /* 0 = any free port */
    const char *tls_cert, *tls_key;
    const char *quota_file;       /* quotas from this file, or ... */
    struct kube_client *kc;       /* ... watched in this cluster; neither: none. With a
                                     client the Nodes are watched too (wh/wh_nodes.h):
                                     what config.cluster leaves 0 is learned from them */
    size_t max_body;              /* bytes; 0 = 1 MiB */
    struct wh_config config;
};

struct wh_server;

int wh_server_start(const struct wh_server_opts *o, struct wh_server **out, struct gs_err *e);
int wh_server_port(const struct wh_server *s);
void wh_server_tick(struct wh_server *s);
void wh_server_stop(struct wh_server *s);

#endif
