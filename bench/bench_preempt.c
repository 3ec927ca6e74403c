/*
 * bench/bench_preempt.c - what a /filter pays when it preempts
 * (filter_preemption, ext/sched_preempt.c). N nodes of 8 GPUs, each full
 * of 1-GPU pods of priority 100 (labels app=aK); a 2-GPU pod of priority
 * 1000 asked about every node finds none, so the /filter searches every
 * node for victims (core_preempt per node, within kubelet's device count),
 * picks one and records the preemption (the commit stub deletes nothing).
 * Between two timed /filters the preemptor is deleted (not timed), so no
 * nomination piles up. With B PodDisruptionBudgets (app=aK, K < B; every
 * other one allows no disruption) each node's candidates are also matched
 * against the budgets. Prints the median time per preempting /filter.
 *
 * usage: bench_preempt [NODES [ROUNDS [BUDGETS]]]   (defaults 1000 5 0)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/sched.h"
#include "bench_util.h"

static json_t *gpu_pod(const char *name, const char *gpus, int priority, const char *app)
{
    json_t *p = json_pack("{s:{s:s, s:s, s:s}, s:{s:i, s:[{s:s, s:s, s:{s:{s:s}}}]}, s:{s:s}}",
                          "metadata", "name", name, "namespace", "default", "uid", name, "spec",
                          "priority", priority, "containers", "name", "main", "image", "cuda",
                          "resources", "limits", "nvidia.com/gpu", gpus, "status", "phase",
                          "Pending");
    if (app)
        json_object_set_new(json_object_get(p, "metadata"), "labels",
                            json_pack("{s:s}", "app", app));
    return p;
}

static int fake_bind(void *ud, const char *ns, const char *name, const char *uid,
                     const struct core_alloc *a, const json_t *annotations, struct gs_err *e)
{
    (void)ud, (void)ns, (void)name, (void)uid, (void)a, (void)annotations, (void)e;
    return 0;
}

static int preempted;

static int fake_preempt(void *ud, struct ext_preemption *pr, struct gs_err *e)
{
    (void)ud, (void)e;
    preempted += pr->n > 0;
    return 0;
}

static void call(int (*verb)(struct ext_sched *, const char *, size_t, struct ext_reply *),
                 struct ext_sched *s, json_t *args)
{
    char *body = json_dumps(args, JSON_COMPACT);
    struct ext_reply rep;
    size_t len;
    verb(s, body, strlen(body), &rep);
    free(ext_reply_take(&rep, &len));
    free(body);
}

int main(int argc, char **argv)
{
    int nodes = argc > 1 ? atoi(argv[1]) : 1000, rounds = argc > 2 ? atoi(argv[2]) : 5;
    int budgets = argc > 3 ? atoi(argv[3]) : 0;
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    if (nodes < 10 || rounds < 1 || rounds > 64 || budgets < 0 || budgets > 100000 ||
        ext_sched_new(&(struct ext_sched_opts){.filter_preemption = 1, .max_pods = 16 * nodes},
                      &s, &e) < 0) {
        fprintf(stderr, "usage: bench_preempt [NODES>=10 [ROUNDS<=64 [BUDGETS]]] %s\n", e.msg);
        return 2;
    }
    ext_sched_set_commit(s, &(struct ext_commit){.bind = fake_bind, .preempt = fake_preempt});
    json_t *names;
    if (bench_add_nodes(s, nodes, &names) < 0)
        return 1;
    for (int k = 0; k < budgets; k++) {
        char name[32];
        snprintf(name, sizeof name, "a%d", k);
        json_t *b = json_pack("{s:{s:s, s:s}, s:{s:{s:{s:s}}}, s:{s:i}}", "metadata",
                              "namespace", "default", "name", name, "spec", "selector",
                              "matchLabels", "app", name, "status", "disruptionsAllowed",
                              k % 2 ? 0 : 1000);
        if (ext_sched_upsert_pdb(s, b, &e) < 0) {
            fprintf(stderr, "budget refused: %s\n", e.msg);
            return 1;
        }
        json_decref(b);
    }
    /* every GPU taken by a low pod: /filter on its node, then /bind */
    for (int i = 0; i < nodes * 8; i++) {
        char name[32], app[32];
        snprintf(name, sizeof name, "low-%06d", i);
        snprintf(app, sizeof app, "a%d", budgets ? i % budgets : i % 7);
        const char *node = json_string_value(json_array_get(names, (size_t)(i / 8)));
        json_t *a = json_pack("{s:o, s:[s]}", "Pod", gpu_pod(name, "1", 100, app), "NodeNames",
                              node);
        call(ext_sched_filter, s, a);
        json_decref(a);
        json_t *b = json_pack("{s:s, s:s, s:s, s:s}", "PodName", name, "PodNamespace", "default",
                              "PodUID", name, "Node", node);
        call(ext_sched_bind, s, b);
        json_decref(b);
    }
    int reps = 20;
    double t[64];
    for (int r = 0; r < rounds; r++) {
        double total = 0;
        for (int k = 0; k < reps; k++) {
            char name[32];
            snprintf(name, sizeof name, "high-%d-%d", r, k);
            json_t *p = gpu_pod(name, "2", 1000, NULL);
            json_t *a = json_pack("{s:O, s:O}", "Pod", p, "NodeNames", names);
            char *body = json_dumps(a, JSON_COMPACT);
            struct ext_reply rep;
            size_t len;
            double t0 = bench_now();
            ext_sched_filter(s, body, strlen(body), &rep);
            total += bench_now() - t0;
            free(ext_reply_take(&rep, &len));
            free(body);
            json_decref(a);
            ext_sched_observe_pod(s, p, 1); /* gone: its preemption with it */
            json_decref(p);
        }
        t[r] = total * 1e6 / reps;
    }
    if (preempted != rounds * reps) {
        fprintf(stderr, "%d of %d /filters preempted\n", preempted, rounds * reps);
        return 1;
    }
    printf("%d nodes of 8 GPUs full of priority-100 pods, %d budgets: a preempting /filter "
           "of a 2-GPU pod (median of %d rounds of %d): %.0f us\n", nodes, budgets, rounds, reps,
           bench_median(t, rounds));
    json_decref(names);
    ext_sched_free(s);
    return 0;
}
