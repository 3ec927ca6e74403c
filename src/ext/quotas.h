/*
 * ext/quotas.h - where GPUQuotas come from, for the extender and the
 * webhook alike.
 *
 * Standalone: a file (--quotas FILE: a YAML or JSON list of GPUQuota
 * objects, docs/quotas.md), re-read within a second when it changes; a file
 * that cannot be read keeps the quotas in force. Cluster: a list+watch of
 * gpuquotas.gpusched.io (when the CRD is not installed yet: one log line,
 * no quotas, and the list is tried again every 30 s at most, so a CRD
 * installed later counts without a restart). Either way every change hands a fresh set to the caller's
 * publish function (the extender: ext_sched_set_quotas(), which counts usage
 * from its own allocation state, exact after restarts; the webhook: its
 * admission check).
 *
 * A broken GPUQuota is reported (a log line, gpusched_quota_objects_broken,
 * and in a cluster a Warning Event on the object) and ignored, never read
 * as zero: when an object breaks on update, its last good version stays in
 * force until it is fixed or deleted.
 *
 * Metrics (in the caller's registry): gpusched_quota_objects,
 * gpusched_quota_objects_broken, gpusched_quota_reload_errors_total.
 *
 * The first set comes once the quotas are known: at start from a file, or
 * when the CRD is not installed (an empty set, as whenever a list finds it
 * gone), else with the first list.
 * Until then a caller knows no quotas and must not act as if there were
 * none: the extender and the webhook stay unready (/readyz).
 *
 * Threads: publish runs on the watch or file thread (and once on the
 * caller's thread at start), one call at a time.
 *
 * Ownership: the start functions return an object freed by
 * ext_quotas_stop(); publish takes ownership of each set it gets. The
 * client and metrics must outlive the object.
 */
#ifndef GPUSCHED_EXT_QUOTAS_H
#define GPUSCHED_EXT_QUOTAS_H

#include "core/quota.h"
#include "kube/client.h"
#include "util/err.h"
#include "util/metrics.h"

struct ext_quotas;

typedef void (*ext_quotas_publish)(void *ud, struct core_quotas *set);

/* Fails when the file cannot be read at start. */
int ext_quotas_from_file(const char *path, ext_quotas_publish publish, void *ud,
                         struct metrics *m, struct ext_quotas **out, struct gs_err *e);
/* events: post Warning Events on broken objects. A CRD not installed is no
 * error (see above). */
int ext_quotas_watch(struct kube_client *kc, int events, ext_quotas_publish publish, void *ud,
                     struct metrics *m, struct ext_quotas **out, struct gs_err *e);
void ext_quotas_stop(struct ext_quotas *q);

#endif
