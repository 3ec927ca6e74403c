/*
 * wh/wh_nodes.h - the cluster's largest GPU, learned from its Nodes.
 *
 * With an API server the webhook need not be told the largest GPU model and
 * node (--max-gpu-memory, --max-gpu-model, --max-gpus-per-node): it watches
 * the Nodes, reads each one as the extender does (wh_node_gpus), keeps each
 * node's largest GPU and GPU count, and hands the cluster's maximum to
 * `publish` whenever it changes (a new GPU model joins, the last node of a
 * model leaves). A node whose GPU annotation cannot be read counts as
 * having no GPU, with a warning.
 *
 * Ownership: wh_nodes_new() returns a table freed by wh_nodes_free();
 * wh_nodes_watch() also starts the watch, stopped by wh_nodes_free(). The
 * table is only touched from the watch's thread; `publish` runs there.
 */
#ifndef GPUSCHED_WH_NODES_H
#define GPUSCHED_WH_NODES_H

#include <jansson.h>

#include "kube/client.h"
#include "wh/wh_admit.h"

typedef void (*wh_nodes_publish)(void *ud, const struct wh_cluster *c);

struct wh_nodes;

/* A table without a watch (fed by wh_nodes_replace / wh_nodes_event). */
struct wh_nodes *wh_nodes_new(const struct core_names *names, wh_nodes_publish publish, void *ud);
/* A table fed by a watch of /api/v1/nodes. */
int wh_nodes_watch(struct kube_client *kc, const struct core_names *names,
                   wh_nodes_publish publish, void *ud, struct wh_nodes **out, struct gs_err *e);
void wh_nodes_free(struct wh_nodes *t);

/* What the watch calls: a full list, and one ADDED/MODIFIED/DELETED event. */
void wh_nodes_replace(void *t, const json_t *items, const char *rv);
void wh_nodes_event(void *t, const char *type, const json_t *node);

#endif
