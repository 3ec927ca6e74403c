/*
 * bench/bench_observe.c - what the extender spends on the pods it does not
 * place: N nodes of 8 GPUs and P CPU-only pods bound to them (two
 * containers, a status as kubelet writes it). Times a relist of all P
 * (ext_sched_replace_pods: every pod parsed and counted on its node), then
 * P watch events of pods already counted (a status update, the common
 * case), then P events that move each pod's requests (each changes its
 * node's sums), and, for scale, decoding one such event's JSON.
 *
 * usage: bench_observe [NODES [PODS [ROUNDS]]]   (defaults 1000 20000 5)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/sched.h"
#include "bench_util.h"

static json_t *pod_obj(int i, int nodes, const char *cpu)
{
    char name[32], uid[48], node[32];
    snprintf(name, sizeof name, "web-%06d", i);
    snprintf(uid, sizeof uid, "0000-uid-%08d", i);
    snprintf(node, sizeof node, "node-%04d", i % nodes);
    return json_pack(
        "{s:{s:s, s:s, s:s, s:{s:s, s:s}}, s:{s:s, s:s, s:[{s:s, s:s, s:{s:{s:s, s:s}}},"
        " {s:s, s:s, s:{s:{s:s, s:s}}}]}, s:{s:s, s:s, s:[{s:s, s:b, s:{s:{s:s}}}]}}",
        "metadata", "name", name, "namespace", "default", "uid", uid, "labels", "app", "web",
        "tier", "frontend", "spec", "nodeName", node, "schedulerName", "default-scheduler",
        "containers", "name", "app", "image", "web:1", "resources", "requests", "cpu", cpu,
        "memory", "1Gi", "name", "sidecar", "image", "proxy:1", "resources", "requests", "cpu",
        "100m", "memory", "128Mi", "status", "phase", "Running", "startTime",
        "2026-11-25T10:00:00Z", "containerStatuses", "name", "app", "ready", 1, "state",
        "running", "startedAt", "2026-11-25T10:00:01Z");
}

int main(int argc, char **argv)
{
    int nodes = argc > 1 ? atoi(argv[1]) : 1000, pods = argc > 2 ? atoi(argv[2]) : 20000;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    if (nodes < 1 || pods < 1 || rounds < 1 || ext_sched_new(&(struct ext_sched_opts){0}, &s,
                                                             &e) < 0) {
        fprintf(stderr, "usage: bench_observe [NODES [PODS [ROUNDS]]] %s\n", e.msg);
        return 2;
    }
    json_t *nl = json_array(), *pl = json_array(), *moved = json_array();
    for (int i = 0; i < nodes; i++)
        json_array_append_new(nl, bench_node_obj(i));
    for (int i = 0; i < pods; i++) {
        json_array_append_new(pl, pod_obj(i, nodes, "500m"));
        json_array_append_new(moved, pod_obj(i, nodes, "600m"));
    }
    if (ext_sched_replace_nodes(s, nl) != 0) {
        fprintf(stderr, "nodes refused\n");
        return 1;
    }
    char *text = json_dumps(json_array_get(pl, 0), JSON_COMPACT);
    double relist[64], same[64], move[64], decode[64];
    if (rounds > 64)
        rounds = 64;
    for (int r = 0; r < rounds; r++) {
        double t0 = bench_now();
        ext_sched_replace_pods(s, pl);
        double t1 = bench_now();
        for (int i = 0; i < pods; i++)
            ext_sched_observe_pod(s, json_array_get(pl, (size_t)i), 0);
        double t2 = bench_now();
        for (int i = 0; i < pods; i++)
            ext_sched_observe_pod(s, json_array_get(moved, (size_t)i), 0);
        double t3 = bench_now();
        for (int i = 0; i < pods; i++)
            json_decref(json_loads(text, 0, NULL));
        double t4 = bench_now();
        relist[r] = (t1 - t0) * 1e3;
        same[r] = (t2 - t1) * 1e6 / pods;
        move[r] = (t3 - t2) * 1e6 / pods;
        decode[r] = (t4 - t3) * 1e6 / pods;
    }
    qsort(relist, (size_t)rounds, sizeof relist[0], bench_cmp_double);
    qsort(same, (size_t)rounds, sizeof same[0], bench_cmp_double);
    qsort(move, (size_t)rounds, sizeof move[0], bench_cmp_double);
    qsort(decode, (size_t)rounds, sizeof decode[0], bench_cmp_double);
    printf("%d nodes, %d CPU-only pods, %d rounds (medians)\n", nodes, pods, rounds);
    printf("relist of all pods:        %8.1f ms\n", relist[rounds / 2]);
    printf("event, nothing changed:    %8.2f us\n", same[rounds / 2]);
    printf("event, requests changed:   %8.2f us\n", move[rounds / 2]);
    printf("decoding one event's JSON: %8.2f us (%zu bytes)\n", decode[rounds / 2],
           strlen(text));
    free(text);
    json_decref(nl);
    json_decref(pl);
    json_decref(moved);
    ext_sched_free(s);
    return 0;
}
