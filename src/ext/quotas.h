/*
 * ext/quotas.h - where the extender's GPUQuotas come from.
 *
 * Standalone: a file (--quotas FILE: a YAML or JSON list of GPUQuota
 * objects, docs/quotas.md), re-read within a second when it changes; a file
 * that cannot be read keeps the quotas in force. Cluster: a list+watch of
 * gpuquotas.gpusched.io (skipped, with one log line, when the CRD is not
 * installed). Either way every change hands a fresh set to
 * ext_sched_set_quotas(), and usage is counted by the scheduler from its own
 * allocation state, so it is exact after restarts.
 *
 * A broken GPUQuota is reported (a log line, gpusched_quota_objects_broken,
 * and in a cluster a Warning Event on the object) and ignored, never read
 * as zero: when an object breaks on update, its last good version stays in
 * force until it is fixed or deleted.
 *
 * Ownership: the start functions return an object freed by
 * ext_quotas_stop(); the scheduler, client and metrics must outlive it.
 */
#ifndef GPUSCHED_EXT_QUOTAS_H
#define GPUSCHED_EXT_QUOTAS_H

#include "ext/sched.h"
#include "kube/client.h"
#include "util/err.h"
#include "util/metrics.h"

struct ext_quotas;

int ext_quotas_from_file(struct ext_sched *s, const char *path, struct metrics *m,
                         struct ext_quotas **out, struct gs_err *e);
/* events: post Warning Events on broken objects. */
int ext_quotas_watch(struct ext_sched *s, struct kube_client *kc, int events, struct metrics *m,
                     struct ext_quotas **out, struct gs_err *e);
void ext_quotas_stop(struct ext_quotas *q);

#endif
