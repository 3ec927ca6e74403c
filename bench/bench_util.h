/*
 * bench_util.h - the few helpers the benchmark programs share (each bench_*.c
 * is its own program): a monotonic clock in seconds and a libcurl write
 * callback that collects a reply into a gs_buf.
 */
#ifndef GPUSCHED_BENCH_UTIL_H
#define GPUSCHED_BENCH_UTIL_H

#include <stddef.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

#ifdef GS_UTIL_BUF_H
/* CURLOPT_WRITEFUNCTION: the reply into the gs_buf given as CURLOPT_WRITEDATA */
static inline size_t bench_on_data(char *p, size_t sz, size_t n, void *ud)
{
    struct gs_buf *b = ud;
    gs_buf_put(b, p, sz * n);
    return b->oom ? 0 : sz * n;
}
#endif

#endif
