/*
 * ext/bindq.h - /bind off the HTTP workers: standalone binds, so that binds
 * from any connections can share the journal's disk flush; cluster-mode
 * binds, which wait on the API server; and a non-leader's binds forwarded
 * to the leader (ext/server.c), which may take seconds to answer.
 *
 * libmicrohttpd's thread pool pins each connection to the worker that
 * accepted it, and a worker answers its connections one request at a time.
 * A /bind waits for its journal record to be flushed (ext/journal.h, group
 * commit); done on the worker, that wait would hold every other connection
 * of the worker, so binds arriving on them could not join the same flush
 * (measured: with eight connections bunched on one or two of four workers,
 * one flush per bind). The server instead hands each /bind here and parks
 * the request (http/http_server.h): one of a few bind threads runs the bind
 * (ext_sched_bind, waiting for the flush), keeps the reply under the
 * request's token and wakes the request; the handler, run again, takes the
 * reply. Binds run in the order they were handed over, up to `threads` at
 * once.
 *
 * Threads: all calls are thread-safe. ext_bindq_stop() runs every bind
 * already handed over and wakes its request before it returns; the replies
 * stay until taken, so free the queue only after the HTTP server stopped.
 * Ownership: bodies are copied; a taken reply belongs to the caller.
 */
#ifndef GPUSCHED_EXT_BINDQ_H
#define GPUSCHED_EXT_BINDQ_H

#include <stddef.h>

#include "ext/sched.h"
#include "util/err.h"

struct ext_bindq;

/* Bind threads (standalone with a journal, cluster mode): binds that can
 * wait on one flush or on the API server at once (they sleep meanwhile;
 * the CPU work stays small). */
#define EXT_BIND_THREADS 16

typedef int (*ext_bind_fn)(void *ud, const char *body, size_t len, struct ext_reply *r);

/* bind(ud, ...) runs a bind; wake(token) hands a request back to the server. */
int ext_bindq_new(ext_bind_fn bind, void *ud, void (*wake)(void *token), int threads,
                  struct ext_bindq **out, struct gs_err *e);
/* Hands a bind for token over (body copied). 0, or -GS_EUNAVAIL once
 * stopping, -GS_ENOMEM: the caller then binds itself. */
int ext_bindq_submit(struct ext_bindq *q, void *token, const char *body, size_t len);
/* 1 with the reply for token moved into *r, its HTTP status in *status and
 * the seconds since it was handed over in *since_s (the bind is finished),
 * 0 when there is none. */
int ext_bindq_take(struct ext_bindq *q, void *token, int *status, struct ext_reply *r,
                   double *since_s);
/* Drops the reply for token, if any: its request ended without taking it
 * (its client went away while it was parked), and the token may come back
 * for another request. */
void ext_bindq_forget(struct ext_bindq *q, void *token);
void ext_bindq_stop(struct ext_bindq *q);
/* Stops it if needed; replies never taken are freed. */
void ext_bindq_free(struct ext_bindq *q);

#endif
