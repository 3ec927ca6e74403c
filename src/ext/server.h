/*
 * ext/server.h - the extender's HTTP surface: routes, metrics, probes.
 *
 * Routes (one table): POST filter, prioritize, bind, preempt (the last path
 * segment decides, so an urlPrefix with a path works); GET /healthz,
 * /readyz (200 once the state is rebuilt), /version, /metrics,
 * /debug/pods/NS/NAME; DELETE /allocations/NS/NAME (release a pod's GPUs).
 * Unknown paths are 404 and wrong methods 405, with a JSON error. Every
 * request is counted by verb and status and timed into a histogram (a
 * parked request from its first hand-over to its answer). In standalone
 * mode with a journal, /bind runs on bind threads while its request is
 * parked (ext/bindq.h).
 *
 * Ownership: ext_server_start() returns a server freed by ext_server_stop();
 * the scheduler and registry must outlive it.
 */
#ifndef GPUSCHED_EXT_SERVER_H
#define GPUSCHED_EXT_SERVER_H

#include "ext/forward.h"
#include "ext/sched.h"
#include "util/err.h"
#include "util/metrics.h"

struct ext_server_opts {
    const char *listen;        /* "HOST:PORT" */
    const char *tls_cert, *tls_key;
    unsigned threads;          /* 0 = 4 */
    size_t max_body;           /* 0 = 8 MiB */
    struct ext_sched *sched;
    struct metrics *metrics;
    int allow_release;         /* serve DELETE /allocations (standalone only: in a
                                  cluster a pod's GPUs are freed by deleting it) */
    int (*ready)(void *ud);    /* NULL = always ready */
    void *ready_ud;
    /* cluster mode: /bind to a node another GPU pod still holds
     * (ext/nodelock.h) waits up to bind_wait_s for it, parked (no worker
     * held), then answers 503; NULL = never waits */
    struct ext_nodelock *lock;
    double bind_wait_s;
    struct ext_forward *forward; /* a non-leader's verbs to the leader (ext/forward.h), or NULL */
    /* /bind runs on this many bind threads while its request is parked
     * (ext/bindq.h): standalone with a journal, so binds from connections
     * of one HTTP worker share the journal's flush; in cluster mode, so a
     * bind waiting on the API server does not hold the other connections
     * of its worker. 0 = on the HTTP worker, unless lock is set
     * (EXT_BIND_THREADS then) */
    int bind_threads;
};

struct ext_server;

int ext_server_start(const struct ext_server_opts *opts, struct ext_server **out,
                     struct gs_err *e);
int ext_server_port(const struct ext_server *s);
void ext_server_stop(struct ext_server *s);
/* Call about once a second (one thread): reloads the TLS pair when its files
 * changed (http_server_reload_tls) and pins the new key for forwarding.
 * 1 = reloaded, 0 = nothing to do, or -GS_E* with *e saying why the old
 * pair (or pin) is kept. Counted in gpusched_extender_tls_reloads_total. */
int ext_server_tick(struct ext_server *s, struct gs_err *e);
/* http_wake, for ext_nodelock_new() */
void ext_server_wake(void *token);

#endif
