/*
 * bench/bench_journal.c - the standalone journal alone on a real disk:
 * records per second, append latency p50/p99 and records per fdatasync for
 * THREADS concurrent appenders, with group commit (ext/journal.h) and, for
 * comparison, with every append serialised behind one mutex as the
 * extender did before group commit (one write + fdatasync per record).
 *
 * bench_bind measures the same through HTTP, where libmicrohttpd's
 * connection-to-worker pinning decides how many binds overlap; this one
 * shows what the journal does when they do.
 *
 * usage: bench_journal DIR THREADS RECORDS [serial]
 *   DIR      a directory on the disk to measure (its journal is removed first)
 *   RECORDS  in all, split over the threads; each is a bind-sized record
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ext/journal.h"
#include "bench_util.h"

struct run {
    struct ext_journal *j;
    int serial, per_thread, failed;
    double *lat;
    pthread_mutex_t mu; /* serial mode: around each append */
};

struct thread_arg {
    struct run *r;
    int t;
};

static void *appender(void *ud)
{
    struct thread_arg *a = ud;
    struct run *r = a->r;
    char uid[64], pad[401];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    for (int i = 0; i < r->per_thread; i++) {
        struct gs_err e = GS_ERR_INIT;
        snprintf(uid, sizeof uid, "uid-%d-%d", a->t, i);
        /* about the size of a bind record with its assignment annotations */
        json_t *rec = json_pack("{s:s, s:s, s:s, s:s}", "op", "bind", "uid", uid, "ns", "default",
                                "annotations", pad);
        double t0 = bench_now();
        if (r->serial)
            pthread_mutex_lock(&r->mu);
        int rc = rec ? ext_journal_append(r->j, rec, &e) : -1;
        if (r->serial)
            pthread_mutex_unlock(&r->mu);
        r->lat[a->t * r->per_thread + i] = bench_now() - t0;
        json_decref(rec);
        if (rc < 0) {
            fprintf(stderr, "bench_journal: %s\n", e.msg);
            pthread_mutex_lock(&r->mu);
            r->failed = 1;
            pthread_mutex_unlock(&r->mu);
            break;
        }
    }
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc < 4 || argc > 5 || (argc == 5 && strcmp(argv[4], "serial") != 0)) {
        fprintf(stderr, "usage: bench_journal DIR THREADS RECORDS [serial]\n");
        return 2;
    }
    int threads = atoi(argv[2]), records = atoi(argv[3]), status = 0;
    if (threads <= 0 || threads > 256 || records < threads) {
        fprintf(stderr, "bench_journal: need 0 < THREADS <= 256 and RECORDS >= THREADS\n");
        return 2;
    }
    struct run r = {.serial = argc == 5, .per_thread = records / threads};
    struct gs_err e = GS_ERR_INIT;
    char path[4096];
    snprintf(path, sizeof path, "%s/journal", argv[1]);
    unlink(path);
    if (ext_journal_open(argv[1], &r.j, &e) < 0) {
        fprintf(stderr, "bench_journal: %s\n", e.msg);
        return 1;
    }
    int n = r.per_thread * threads, started = 0;
    pthread_t *th = calloc((size_t)threads, sizeof *th);
    struct thread_arg *args = calloc((size_t)threads, sizeof *args);
    r.lat = calloc((size_t)n, sizeof *r.lat);
    pthread_mutex_init(&r.mu, NULL);
    if (!th || !args || !r.lat) {
        fprintf(stderr, "bench_journal: out of memory\n");
        status = 2;
        goto out;
    }
    double t0 = bench_now();
    for (int t = 0; t < threads; t++, started++) {
        args[t] = (struct thread_arg){&r, t};
        if (pthread_create(&th[t], NULL, appender, &args[t]) != 0) {
            fprintf(stderr, "bench_journal: cannot start a thread\n");
            status = 1;
            break;
        }
    }
    for (int t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    double wall = bench_now() - t0;
    struct ext_journal_stats st;
    ext_journal_stats(r.j, &st);
    if (status == 0 && !r.failed) {
        qsort(r.lat, (size_t)n, sizeof *r.lat, by_value);
        printf("%-6s %7d %7d %10.0f %9.3f %9.3f %10.2f\n", r.serial ? "serial" : "group", threads,
               n, n / wall, r.lat[(n - 1) / 2] * 1e3, r.lat[(int)(0.99 * (n - 1) + 0.5)] * 1e3,
               st.flushes ? (double)st.records / (double)st.flushes : 0);
    } else {
        status = 1;
    }
out:
    ext_journal_close(r.j);
    unlink(path);
    pthread_mutex_destroy(&r.mu);
    free(r.lat);
    free(args);
    free(th);
    return status;
}
