/*
 * util/worker.c - see worker.h.
 */
#include "util/worker.h"

#include <time.h>

int gs_worker_start(struct gs_worker *w, void *(*fn)(void *), void *arg)
{
    atomic_init(&w->stop, 0);
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    if (pthread_create(&w->thread, NULL, fn, arg) != 0) {
        pthread_cond_destroy(&w->cv);
        pthread_mutex_destroy(&w->mu);
        return -1;
    }
    return 0;
}

int gs_worker_sleep(struct gs_worker *w, double seconds, atomic_int *wake)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += (time_t)seconds;
    ts.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
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
