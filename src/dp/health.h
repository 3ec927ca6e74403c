/*
 * dp/health.h - which GPU events make a GPU unhealthy, and when it comes back.
 *
 * NVIDIA's plugin marks a GPU unhealthy on any critical XID outside a short
 * list of application errors, and keeps it so until the plugin restarts.
 * Here the same XIDs are ignored by default (13, 31, 43, 45, 68, 109; more
 * with --ignore-xids, or "all" to switch health checks off), the rest are
 * split into fatal XIDs (the GPU needs a reset: ECC double-bit, fell off the
 * bus, GSP/PMU halts, uncontained errors, NVLink down) and transient ones,
 * and an unhealthy GPU is re-probed after transient_ms for a transient XID.
 * After a fatal one it stays Unhealthy until the plugin restarts, as with
 * NVIDIA's plugin: a GPU that needs a reset still answers the probe's
 * queries. fatal_ms > 0 re-probes those too. A GPU that passes the
 * backend's probe turns Healthy again; one that fails stays Unhealthy with
 * the probe's reason and is tried again after the same delay.
 *
 * A MIG instance has a health of its own: an event on it (NVML names the
 * instance by its GPU and GPU/compute instance ids) marks that instance
 * only, as NVIDIA's plugin does, so one faulting slice does not take the
 * GPU's other instances, and their pods' neighbours, off the node. It is
 * re-probed through its GPU. An event on the GPU itself marks the GPU,
 * and with it every instance on it.
 *
 * The state lives in the inventory (gpu.healthy / gpu.reason, the same
 * per MIG instance) plus struct dp_health_state; the caller holds whatever
 * lock guards them.
 */
#ifndef GPUSCHED_DP_HEALTH_H
#define GPUSCHED_DP_HEALTH_H

#include <stdint.h>

#include "dp/gpu.h"

#define DP_HEALTH_MAX_IGNORED 64

struct dp_health_cfg {
    int disabled;                           /* "all": events never change health */
    int n_ignored;
    uint64_t ignored[DP_HEALTH_MAX_IGNORED];
    int n_forced;                           /* counted even when ignored above */
    uint64_t forced[DP_HEALTH_MAX_IGNORED];
    int64_t transient_ms;                   /* re-probe delay after a transient XID */
    int64_t fatal_ms;                       /* re-probe delay after a fatal XID; 0 never */
};

enum dp_xid_class { DP_XID_IGNORED, DP_XID_TRANSIENT, DP_XID_FATAL };

/* Defaults: NVIDIA's ignored XIDs, re-probes after 10 s, none after a
 * fatal XID. */
void dp_health_cfg_default(struct dp_health_cfg *c);
/* Adds a comma-separated XID list ("43,74") to the ignored ones, or
 * disables health checks for "all". Errors name the bad entry. */
int dp_health_parse_ignored(struct dp_health_cfg *c, const char *list, struct gs_err *e);
/* Adds a comma-separated XID list to those that count even when ignored by
 * default or by --ignore-xids (NVIDIA's DP_ENABLE_HEALTHCHECKS); "all" still
 * switches every check off. Errors name the bad entry. */
int dp_health_parse_forced(struct dp_health_cfg *c, const char *list, struct gs_err *e);

enum dp_xid_class dp_health_classify(const struct dp_health_cfg *c, uint64_t xid);
const char *dp_xid_class_name(enum dp_xid_class k);

struct dp_health_state {
    int64_t recheck_at[DP_MAX_GPUS];  /* ms; 0 = nothing scheduled */
    uint64_t xids[DP_MAX_GPUS];       /* events counted per GPU, its MIG instances' too */
    uint64_t last_xid[DP_MAX_GPUS];
    int64_t mig_recheck_at[DP_MAX_GPUS][DP_MAX_MIG]; /* the same per MIG instance */
    uint64_t mig_last_xid[DP_MAX_GPUS][DP_MAX_MIG];
};

/* Applies one event at time now_ms. An event for all GPUs (the event
 * source failed) marks only the healthy ones among dead[0..n_dead), the
 * GPUs that failed a probe (every healthy GPU when dead is NULL; the caller
 * probes without holding its lock: a probe can hang on a bad GPU).
 * Returns 1 if any GPU's health changed. */
int dp_health_event(const struct dp_health_cfg *c, struct dp_inventory *inv,
                    struct dp_health_state *hs, const struct dp_event *ev,
                    const char (*dead)[DP_UUID_MAX], int n_dead, int64_t now_ms);

/* Re-probes the unhealthy GPUs and MIG instances whose time has come, with
 * b->probe (a MIG instance's GPU). Returns the number whose health changed.
 * It is the three steps below; a caller whose lock guards the inventory
 * takes them itself, so as to probe without the lock (a probe can hang on
 * a bad GPU). */
int dp_health_reprobe(const struct dp_health_cfg *c, struct dp_inventory *inv,
                      struct dp_health_state *hs, struct dp_backend *b, int64_t now_ms);
/* The GPUs (UUIDs into uuids[0..DP_MAX_GPUS)) with an unhealthy GPU or MIG
 * instance whose re-probe is due at now_ms; returns how many. */
int dp_health_due(struct dp_inventory *inv, struct dp_health_state *hs, int64_t now_ms,
                  char (*uuids)[DP_UUID_MAX]);
/* Applies the probes of uuids[0..n), res[k].code 0 when GPU k passed, to the
 * units still due at now_ms, matched by UUID (the inventory may have changed
 * while they ran). A unit that failed again is due next counting from
 * done_ms, when the probes ended (a probe may hang for longer than the
 * re-probe period). Returns the number whose health changed. */
int dp_health_reprobed(const struct dp_health_cfg *c, struct dp_inventory *inv,
                       struct dp_health_state *hs, const char (*uuids)[DP_UUID_MAX],
                       const struct gs_err *res, int n, int64_t now_ms, int64_t done_ms);

/* Carries health across a re-discovery: GPUs and MIG instances in `next`
 * that were in `prev` (same UUID) keep their health, reason and schedule. */
void dp_health_carry(const struct dp_inventory *prev, const struct dp_health_state *hprev,
                     struct dp_inventory *next, struct dp_health_state *hnext);

#endif
