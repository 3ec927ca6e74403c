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
