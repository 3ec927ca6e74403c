/*
 * util/worker.h - a background thread that sleeps between rounds and stops
 * at once when told.
 *
 * The API watch, the Lease elector and the extender's housekeeping each run
 * such a loop; this is the pattern once: start, an interruptible sleep,
 * stop (wake, join, clean up). The struct is public so that owners embed it;
 * `mu` and `cv` may also guard and signal the owner's own state (the sleep
 * takes an optional flag that ends it early, set under `mu` before a
 * gs_worker_wake).
 */
#ifndef GS_UTIL_WORKER_H
#define GS_UTIL_WORKER_H

#include <pthread.h>
#include <stdatomic.h>

struct gs_worker {
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int stop;
};

/* Initialises w and starts fn(arg) on a thread. -1 when no thread can be
 * started (w is then cleaned up; nothing to stop). */
int gs_worker_start(struct gs_worker *w, void *(*fn)(void *), void *arg);

/* Sleeps up to `seconds`, less when stopping or when *wake (may be NULL) is
 * nonzero. Returns nonzero when the worker is stopping. */
int gs_worker_sleep(struct gs_worker *w, double seconds, atomic_int *wake);

/* Nonzero once gs_worker_stop has been called. */
int gs_worker_stopping(struct gs_worker *w);

/* Ends a gs_worker_sleep early (after the caller set its wake flag). */
void gs_worker_wake(struct gs_worker *w);

/* Tells the thread to stop, wakes it and joins it. mu and cv stay usable
 * (a gs_worker_wake from another thread is harmless) until
 * gs_worker_destroy. */
void gs_worker_stop(struct gs_worker *w);

/* Releases mu and cv, after gs_worker_stop and once nothing wakes it. */
void gs_worker_destroy(struct gs_worker *w);

#endif
