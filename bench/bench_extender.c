/*
 * bench/bench_extender.c - CPU time of one extender decision without HTTP:
 * ExtenderArgs parsing, /filter and /prioritize on N nodes x 8 GPUs (the
 * files bench/extender_gen.py writes), each verb with its reply written.
 *
 * usage: bench_extender NODES.json FILTER.json [ITERATIONS]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ext/proto.h"
#include "ext/sched.h"
#include "ext/standalone.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf;
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc(*len + 1);
    if (buf && fread(buf, 1, *len, f) != *len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf)
        buf[*len] = '\0';
    return buf;
}

int main(int argc, char **argv)
{
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    struct ext_standalone *st;
    size_t len;
    int iters = argc > 3 ? atoi(argv[3]) : 200;

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
     * NodeNames cache, as /filter and /prioritize do with a repeated array */
    static const char *const names[] = {"parse", "parse again", "filter", "prioritize"};
    struct ext_namecache *cache = ext_namecache_new(1);
    double t[4] = {0};
    for (int i = 0; i < iters && cache; i++) {
        struct ext_args a;
        struct ext_reply r;
        size_t rl;
        double t0 = now();
        if (ext_args_parse(body, len, &a, &e) == 0)
            ext_args_clear(&a);
        double t1 = now();
        if (ext_args_parse_cached(cache, body, len, &a, &e) == 0)
            ext_args_clear(&a);
        double t2 = now();
        ext_sched_filter(s, body, len, &r);
        free(ext_reply_take(&r, &rl));
        double t3 = now();
        ext_sched_prioritize(s, body, len, &r);
        free(ext_reply_take(&r, &rl));
        double t4 = now();
        t[0] += t1 - t0;
        t[1] += t2 - t1;
        t[2] += t3 - t2;
        t[3] += t4 - t3;
    }
    for (int k = 0; k < 4; k++)
        printf("%-11s %8.3f ms\n", names[k], t[k] / iters * 1e3);
    ext_namecache_free(cache);
    ext_standalone_close(st);
    ext_sched_free(s);
    free(body);
    return 0;
}
