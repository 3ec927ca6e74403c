/*
 * bench/bench_extender.c - CPU time of one extender decision without HTTP:
 * ExtenderArgs parsing, /filter and /prioritize on N nodes x 8 GPUs (the
 * files bench/extender_gen.py writes), each verb with its reply written,
 * asked again with nothing changed and after a bind (timed too) changed one
 * node.
 *
 * usage: bench_extender NODES.json FILTER.json [ITERATIONS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ext/memo.h"
#include "ext/proto.h"
#include "ext/sched.h"
#include "ext/standalone.h"
#include "util/buf.h"
#include "util/log.h"
#include "bench_util.h"

/* The pod of bench/extender_gen.py's requests. */
#define POD_NAME "bench"
#define POD_NS "default"
#define POD_UID "bench-uid"

static char *slurp(const char *path, size_t *len)
{
    struct gs_buf b = {0};
    if (gs_buf_read_file(&b, path, 64u << 20, NULL) < 0) {
        gs_buf_free(&b);
        return NULL;
    }
    *len = b.len;
    return b.buf;
}

/* Lets a reply go as the HTTP layer does: a kept text is sent without a
 * copy (ext/server.c). */
static void drop(struct ext_reply *r)
{
    size_t len;
    if (r->shared)
        ext_text_put(r->shared);
    else
        free(ext_reply_take(r, &len));
}

/* Binds the pod of the last /filter to node; 1 when it was bound. */
static int bind(struct ext_sched *s, const char *node)
{
    char b[512];
    struct ext_reply r;
    snprintf(b, sizeof b, "{\"PodName\":\"%s\",\"PodNamespace\":\"%s\",\"PodUID\":\"%s\","
             "\"Node\":\"%s\"}", POD_NAME, POD_NS, POD_UID, node);
    int ok = ext_sched_bind(s, b, strlen(b), &r) == 200;
    drop(&r);
    return ok;
}

int main(int argc, char **argv)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    struct ext_standalone *st;
    size_t len;
    int iters = argc > 3 ? atoi(argv[3]) : 200;

    log_set_level(LOG_WARN); /* not a line per bind */
    if (argc < 3) {
        fprintf(stderr, "usage: bench_extender NODES.json FILTER.json [ITERATIONS]\n");
        return 2;
    }
    char *body = slurp(argv[2], &len);
    if (!body || ext_sched_new(&(struct ext_sched_opts){0}, &s, &e) < 0 ||
        ext_standalone_open(s, argv[1], NULL, &st, &e) < 0) {
        fprintf(stderr, "bench_extender: %s\n", body ? e.msg : "cannot read the request");
        return 1;
    }
    /* "parse" scans the NodeNames array; "parse again" finds it in a
     * NodeNames cache, as /filter and /prioritize do with a repeated array.
     * /filter and /prioritize run with the cluster unchanged since the same
     * question was last asked (the scheduler answers from its kept entry),
     * then after the pod was bound to one of the nodes (that node changed;
     * it is released again before the next round) */
    static const char *const names[] = {"parse", "parse again", "filter", "prioritize",
                                        "bind", "filter, 1 node changed",
                                        "prioritize, 1 node changed"};
    enum { STEPS = sizeof names / sizeof names[0] };
    struct ext_namecache *cache = ext_namecache_new(1);
    struct ext_args nodes;
    double t[STEPS] = {0};
    if (ext_args_parse(body, len, &nodes, &e) < 0 || nodes.n == 0) {
        fprintf(stderr, "bench_extender: %s\n", nodes.n ? e.msg : "no NodeNames");
        return 1;
    }
    /* a cluster that has seen 1,000 pods, as one that has run a while: the
     * learned workload is then rebuilt only every ~32 binds (core/frag.c) */
    for (int i = 0; i < 1000; i++) {
        struct ext_reply r;
        ext_sched_filter(s, body, len, &r);
        drop(&r);
        if (!bind(s, nodes.names[i % nodes.n]) || ext_sched_release(s, POD_NS "/" POD_NAME, &e) < 0) {
            fprintf(stderr, "bench_extender: the pod did not bind to %s\n",
                    nodes.names[i % nodes.n]);
            return 1;
        }
    }
    for (int i = 0; i < iters && cache; i++) {
        struct ext_args a;
        struct ext_reply r;
        double t0 = bench_now();
        if (ext_args_parse(body, len, &a, &e) == 0)
            ext_args_clear(&a);
        double t1 = bench_now();
        if (ext_args_parse_cached(cache, body, len, &a, &e) == 0)
            ext_args_clear(&a);
        double t2 = bench_now();
        /* the last round's release: brings the kept answers up to date */
        ext_sched_filter(s, body, len, &r);
        drop(&r);
        ext_sched_prioritize(s, body, len, &r);
        drop(&r);
        double t3 = bench_now();
        ext_sched_filter(s, body, len, &r);
        drop(&r);
        double t4 = bench_now();
        ext_sched_prioritize(s, body, len, &r);
        drop(&r);
        double t5 = bench_now();
        int bound = bind(s, nodes.names[i % nodes.n]);
        double t6 = bench_now();
        ext_sched_filter(s, body, len, &r);
        drop(&r);
        double t7 = bench_now();
        ext_sched_prioritize(s, body, len, &r);
        drop(&r);
        double t8 = bench_now();
        if (!bound || ext_sched_release(s, POD_NS "/" POD_NAME, &e) < 0) {
            fprintf(stderr, "bench_extender: the pod did not bind to %s\n",
                    nodes.names[i % nodes.n]);
            return 1;
        }
        t[0] += t1 - t0;
        t[1] += t2 - t1;
        t[2] += t4 - t3;
        t[3] += t5 - t4;
        t[4] += t6 - t5;
        t[5] += t7 - t6;
        t[6] += t8 - t7;
    }
    for (int k = 0; k < STEPS; k++)
        printf("%-26s %8.3f ms\n", names[k], t[k] / iters * 1e3);
    ext_args_clear(&nodes);
    ext_namecache_free(cache);
    ext_standalone_close(st);
    ext_sched_free(s);
    free(body);
    return 0;
}
