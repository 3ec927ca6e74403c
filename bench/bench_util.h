/*
 * bench_util.h - the few helpers the benchmark programs share (each bench_*.c
 * is its own program): a monotonic clock in seconds, the order of doubles
 * and medians, an in-process node (with jansson) and a libcurl write
 * callback that collects a reply into a gs_buf.
 */
#ifndef GPUSCHED_BENCH_UTIL_H
#define GPUSCHED_BENCH_UTIL_H

#include <stddef.h>
#include <stdio.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* qsort's order for doubles, ascending (medians) */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#include <stdlib.h>

/* The median of t[0..n) (sorted in place). */
static inline double bench_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof t[0], bench_cmp_double);
    return t[n / 2];
}

#ifdef JANSSON_H
/* Node i of an in-process cluster ("node-%04d"): 8 A100s by the GPU
 * operator's labels, 96 CPUs, 1 TiB, 110 pods. */
static inline json_t *bench_node_obj(int i)
{
    char name[32];
    snprintf(name, sizeof name, "node-%04d", i);
    return json_pack("{s:{s:s, s:{s:s, s:s}}, s:{s:{s:s, s:s, s:s, s:s}}}", "metadata", "name",
                     name, "labels", "nvidia.com/gpu.product", "NVIDIA-A100-SXM4-80GB",
                     "nvidia.com/gpu.memory", "81920", "status", "allocatable", "cpu", "96",
                     "memory", "1024Gi", "pods", "110", "nvidia.com/gpu", "8");
}
#endif

#if defined(JANSSON_H) && defined(GPUSCHED_EXT_SCHED_H)
/* Nodes 0..n-1 of bench_node_obj given to the scheduler; their names in
 * *names (a new array). 0, or -1 when refused (said on stderr). */
static inline int bench_add_nodes(struct ext_sched *s, int n, json_t **names)
{
    json_t *nl = json_array();
    *names = json_array();
    for (int i = 0; i < n; i++) {
        json_t *node = bench_node_obj(i);
        json_array_append(*names, json_object_get(json_object_get(node, "metadata"), "name"));
        json_array_append_new(nl, node);
    }
    int bad = ext_sched_replace_nodes(s, nl);
    json_decref(nl);
    if (bad)
        fprintf(stderr, "nodes refused\n");
    return bad ? -1 : 0;
}
#endif

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
