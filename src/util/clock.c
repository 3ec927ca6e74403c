/*
 * util/clock.c - the monotonic clock in seconds (util/clock.h).
 */
#include <time.h>

#include "util/clock.h"

double gs_mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void gs_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

struct timespec gs_mono_ts(double at)
{
    struct timespec ts;
    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}
