/*
 * util/clock.h - the monotonic clock in seconds.
 *
 * Timeouts, back-offs, waits and elapsed times (request latency, a
 * simulation run, a bound) are measured on CLOCK_MONOTONIC (a wall
 * clock step must not end or stretch them); this is the one reading of it
 * as a double that they share.
 */
#ifndef GS_UTIL_CLOCK_H
#define GS_UTIL_CLOCK_H

#include <pthread.h>
#include <time.h>

/* Seconds on CLOCK_MONOTONIC (pthread_cond_timedwait with a condition
 * attribute set to that clock takes the same time base). */
double gs_mono_s(void);

/* Initialises cv so that pthread_cond_timedwait reads its deadline on
 * CLOCK_MONOTONIC; gs_mono_ts turns a gs_mono_s() time into that deadline. */
void gs_cond_init_mono(pthread_cond_t *cv);
struct timespec gs_mono_ts(double at);

#endif
