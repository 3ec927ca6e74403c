/*
 * bench/bench_nominated.c - what a /filter pays while pods are nominated
 * to nodes by a preemption (ext/sched_nominated.c). N nodes of 8 GPUs; the
 * same 1-GPU pod asked about every node, again and again, as kube-scheduler
 * asks pod after pod of one shape. With no nomination the answer is kept
 * (ext/memo.h); with K pending 8-GPU pods of higher priority nominated to
 * K nodes, each /filter gathers them, reserves each one's GPUs on its node
 * and takes them back (a what-if), refuses those nodes, and writes the
 * reply from the verdicts. Prints the median time per /filter of each,
 * and per /filter + /prioritize (as kube-scheduler sends them: the
 * what-if moves the cluster's version, so the kept /prioritize reply is
 * scored again after each such /filter).
 *
 * usage: bench_nominated [NODES [ROUNDS]]   (defaults 1000 7)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/sched.h"
#include "bench_util.h"

static json_t *gpu_pod(const char *name, const char *gpus, int priority)
{
    return json_pack("{s:{s:s, s:s, s:s}, s:{s:i, s:[{s:s, s:s, s:{s:{s:s}}}]}, s:{s:s}}",
                     "metadata", "name", name, "namespace", "default", "uid", name, "spec",
                     "priority", priority, "containers", "name", "main", "image", "cuda",
                     "resources", "limits", "nvidia.com/gpu", gpus, "status", "phase",
                     "Pending");
}

/* cluster mode, where nominations are kept: binds "written" at once */
static int fake_bind(void *ud, const char *ns, const char *name, const char *uid,
                     const struct core_alloc *a, const json_t *annotations, struct gs_err *e)
{
    (void)ud, (void)ns, (void)name, (void)uid, (void)a, (void)annotations, (void)e;
    return 0;
}

/* The median over rounds of the mean time of `reps` /filters (each
 * followed by a /prioritize with prio), in µs. */
static double time_filters(struct ext_sched *s, const char *body, int rounds, int reps,
                           int prio)
{
    double t[64];
    for (int r = 0; r < rounds; r++) {
        double t0 = bench_now();
        for (int k = 0; k < reps; k++) {
            struct ext_reply rep;
            size_t len;
            ext_sched_filter(s, body, strlen(body), &rep);
            free(ext_reply_take(&rep, &len));
            if (prio) {
                ext_sched_prioritize(s, body, strlen(body), &rep);
                free(ext_reply_take(&rep, &len));
            }
        }
        t[r] = (bench_now() - t0) * 1e6 / reps;
    }
    return bench_median(t, rounds);
}

int main(int argc, char **argv)
{
    int nodes = argc > 1 ? atoi(argv[1]) : 1000, rounds = argc > 2 ? atoi(argv[2]) : 7;
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    if (nodes < 10 || rounds < 1 || rounds > 64 ||
        ext_sched_new(&(struct ext_sched_opts){0}, &s, &e) < 0) {
        fprintf(stderr, "usage: bench_nominated [NODES>=10 [ROUNDS<=64]] %s\n", e.msg);
        return 2;
    }
    ext_sched_set_commit(s, &(struct ext_commit){.bind = fake_bind});
    json_t *names;
    if (bench_add_nodes(s, nodes, &names) < 0)
        return 1;
    json_t *args = json_pack("{s:o, s:O}", "Pod", gpu_pod("asked", "1", 0), "NodeNames", names);
    char *body = json_dumps(args, JSON_COMPACT);
    int reps = 200;
    printf("%d nodes of 8 GPUs, a 1-GPU pod asked about all of them, %d rounds of %d "
           "(medians, us)\n%-22s %10s %22s\n", nodes, rounds, reps, "", "/filter",
           "/filter + /prioritize");
    time_filters(s, body, 1, 10, 1); /* warm: the kept entries made */
    printf("%-22s %10.1f %22.1f\n", "no nomination", time_filters(s, body, rounds, reps, 0),
           time_filters(s, body, rounds, reps, 1));
    int done = 0;
    for (int k = 1; k <= 100; k *= 10) {
        for (; done < k; done++) { /* an 8-GPU pod of priority 1000 nominated to node done */
            char name[32];
            snprintf(name, sizeof name, "pre-%03d", done);
            json_t *p = gpu_pod(name, "8", 1000);
            json_object_set_new(json_object_get(p, "status"), "nominatedNodeName",
                                json_string(json_string_value(json_array_get(names, (size_t)done))));
            ext_sched_observe_pod(s, p, 0);
            json_decref(p);
        }
        char what[32];
        snprintf(what, sizeof what, "%d nominated pods", k);
        printf("%-22s %10.1f %22.1f\n", what, time_filters(s, body, rounds, reps, 0),
               time_filters(s, body, rounds, reps, 1));
    }
    free(body);
    json_decref(args);
    json_decref(names);
    ext_sched_free(s);
    return 0;
}
