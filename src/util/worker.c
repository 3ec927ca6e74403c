/*
 * util/worker.c - see worker.h.
 */
#include "util/worker.h"

#include "util/clock.h"

int gs_worker_start(struct gs_worker *w, void *(*fn)(void *), void *arg)
{
    atomic_init(&w->stop, 0);
    pthread_mutex_init(&w->mu, NULL);
    gs_cond_init_mono(&w->cv); /* a wall clock step must not stretch a nap */
    if (pthread_create(&w->thread, NULL, fn, arg) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        return -1;
    }
    return 0;
}

int gs_worker_sleep(struct gs_worker *w, double seconds, atomic_int *wake)
{
    struct timespec ts = gs_mono_ts(gs_mono_s() + seconds);
    pthread_mutex_lock(&w->mu);
    while (!atomic_load(&w->stop) && !(wake && atomic_load(wake)))
        if (pthread_cond_timedwait(&w->cv, &w->mu, &ts) != 0)
            break;
    pthread_mutex_unlock(&w->mu);
    return atomic_load(&w->stop);
}

int gs_worker_stopping(struct gs_worker *w) { return atomic_load(&w->stop); }

void gs_worker_wake(struct gs_worker *w)
{
    pthread_mutex_lock(&w->mu);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

void gs_worker_stop(struct gs_worker *w)
{
    pthread_mutex_lock(&w->mu);
    atomic_store(&w->stop, 1);
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    pthread_join(w->thread, NULL);
}

void gs_worker_destroy(struct gs_worker *w)
{
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
}
