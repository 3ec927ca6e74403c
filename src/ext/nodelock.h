/*
 * ext/nodelock.h - one pending GPU pod per node.
 *
 * kubelet's Allocate names device IDs only, so the device plugin finds the
 * pod it is for among the GPU pods bound to its node and not yet admitted.
 * With two such pods it cannot know which one kubelet is admitting
 * (kubelet orders pods by creationTimestamp, 1 s resolution, unstable
 * sort), and a wrong guess gives a container another pod's GPUs. So the
 * extender (cluster mode) binds a GPU pod to a node only when no GPU pod
 * bound there earlier still waits for kubelet: that pod is the node's
 * *holder* until the device plugin marks it <prefix>allocated-at after its
 * last Allocate, kubelet reports it (status.startTime: admitted), it
 * finishes, fails or is deleted, or `timeout_s` passes (a kubelet that
 * never admits it: stale). docs/design.md, "One pending GPU pod per node".
 *
 * The holders are derived from the pods (the sched module sets and clears
 * them from its pod watch and its own binds), so a restarted extender
 * rebuilds them from the API server. A /bind for a held node waits
 * without holding an HTTP worker: the server parks the request
 * (http_req_park) and registers its token here; a release of the node
 * wakes every waiter of that node (they try again; one wins), and a thread
 * wakes waiters whose deadline passed or whose holder went stale.
 *
 * Thread-safe (own mutex, taken inside the sched lock, never around it).
 * Ownership: ext_nodelock_new() returns an object freed by
 * ext_nodelock_free() after ext_nodelock_shutdown().
 */
#ifndef GPUSCHED_EXT_NODELOCK_H
#define GPUSCHED_EXT_NODELOCK_H

#include <stddef.h>

#include "util/err.h"

struct ext_nodelock;

/* timeout_s: a holder older than this no longer holds its node. wake: how
 * a parked request is handed back to its handler (http_wake). */
int ext_nodelock_new(double timeout_s, void (*wake)(void *token), struct ext_nodelock **out,
                     struct gs_err *e);
/* Wakes every waiter and refuses new ones (their requests then answer at
 * once); stops the thread. */
void ext_nodelock_shutdown(struct ext_nodelock *l);
void ext_nodelock_free(struct ext_nodelock *l);
double ext_nodelock_timeout(const struct ext_nodelock *l);

/* ---- holders ---- */
/* Pod uid ("ns/name" for messages) bound to node at `since` (seconds since
 * the epoch) waits for kubelet. Replaces what uid held before. */
void ext_nodelock_set(struct ext_nodelock *l, const char *uid, const char *name, const char *node,
                      double since);
/* uid no longer waits (admitted, gone): wakes its node's waiters. Returns
 * 1 when uid held a node. */
int ext_nodelock_clear(struct ext_nodelock *l, const char *uid);
/* Takes node for uid when no other pod holds it at `now` (0), else 1 and
 * *why says who holds it and for how long. */
int ext_nodelock_take(struct ext_nodelock *l, const char *node, const char *uid,
                      const char *name, double now, char *why, size_t cap);
/* Is node held by a pod other than uid at `now`? */
int ext_nodelock_held(struct ext_nodelock *l, const char *node, const char *uid, double now);
/* Holders now (for metrics and tests). */
int ext_nodelock_count(struct ext_nodelock *l, double now);

/* ---- waiters ---- */
/* Registers a parked request (token) waiting for node, to be woken when
 * the node is released or at `deadline`. Returns 1 registered (park it),
 * 0 when the node is no longer held by another pod (try again now), -1
 * after shutdown or out of memory (answer now). */
int ext_nodelock_wait(struct ext_nodelock *l, const char *node, const char *uid, void *token,
                      double deadline, double started, double now);
/* A request handed back after a wake: its deadline and first try, and 1;
 * 0 for a request that never waited. The entry is gone afterwards. */
int ext_nodelock_reclaim(struct ext_nodelock *l, void *token, double *deadline, double *started);

#endif
