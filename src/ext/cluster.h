/*
 * ext/cluster.h - the extender on a live cluster.
 *
 * Watches nodes and pods through kube/watch (nodes first, so that pods'
 * assignments find their nodes), feeds them to the scheduler, and rebuilds
 * every allocation from pod annotations after each (re)list. Installs the
 * commit backend that makes a bind real: a strategic-merge patch of the
 * assignment annotations, then the Binding; if the Binding fails the
 * annotations are removed again. Runs leader election when asked
 * (non-leaders answer /bind with 503), marks nodes with a stale GPU
 * inventory unavailable, posts an Event on pods that fit nowhere, and,
 * when GPUs free up, touches pending GPU pods that did not fit (annotation
 * <prefix>retry-at) so kube-scheduler retries them at once instead of after
 * its unschedulable-queue flush.
 *
 * Ownership: returns an object freed by ext_cluster_stop(); the client and
 * scheduler must outlive it.
 */
#ifndef GPUSCHED_EXT_CLUSTER_H
#define GPUSCHED_EXT_CLUSTER_H

#include "ext/config.h"
#include "ext/sched.h"
#include "kube/client.h"
#include "util/metrics.h"

struct ext_cluster;

int ext_cluster_start(struct kube_client *kc, struct ext_sched *s, const struct ext_config *cfg,
                      struct metrics *m, struct ext_cluster **out, struct gs_err *e);
/* Ready once nodes and pods have been listed and the state rebuilt. */
int ext_cluster_ready(void *cluster);
/* Refreshes the watch, rebuild and leader metrics (from the metrics
 * collect callback). */
void ext_cluster_collect(struct ext_cluster *cl);
/* 1 and the Lease holder's identity in out when another replica leads;
 * 0 when this one leads, nobody does, or there is no election. */
int ext_cluster_leader(void *cluster, char *out, size_t cap);
void ext_cluster_stop(struct ext_cluster *cl);

#endif
