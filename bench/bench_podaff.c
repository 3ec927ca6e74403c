/*
 * bench/bench_podaff.c - what a GPU pod's /filter + /prioritize pay for the
 * pod (anti-)affinity terms of the pods already placed (kube-scheduler's
 * symmetric half of InterPodAffinity, ext/sched_podaff.c). N nodes of 8
 * GPUs, each with its hostname label; K pods without GPUs bound across them,
 * each with a preferred podAntiAffinity term on the hostname that picks
 * app=web (as many charts set it). Every pod asked is new (its own UID), as
 * kube-scheduler asks pod after pod: labelled app=web (the terms pick it)
 * or app=batch (they do not), or app=web in namespace b (where the terms,
 * of namespace default, do not pick), and bound after its /prioritize, so the
 * next pod finds the cluster changed (no kept reply). Prints the median
 * time of one pod's /filter and /prioritize over all nodes (the bind not
 * counted), for K = 0, 100, 1,000, 10,000.
 *
 * usage: bench_podaff [NODES [ROUNDS]]   (defaults 1000 7)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ext/sched.h"
#include "util/log.h"
#include "bench_util.h"

#define HOST "kubernetes.io/hostname"

static json_t *gpu_pod(const char *name, const char *app, const char *ns)
{
    return json_pack("{s:{s:s, s:s, s:s, s:{s:s}}, s:{s:[{s:s, s:s, s:{s:{s:s}}}]}, s:{s:s}}",
                     "metadata", "name", name, "namespace", ns, "uid", name, "labels",
                     "app", app, "spec", "containers", "name", "main", "image", "cuda",
                     "resources", "limits", "nvidia.com/gpu", "1", "status", "phase", "Pending");
}

/* A running pod without GPUs on node that prefers no app=web on its host. */
static json_t *owner(const char *name, const char *node)
{
    return json_pack("{s:{s:s, s:s, s:s}, s:{s:s, s:{s:{s:[{s:i, s:{s:s, s:{s:{s:s}}}}]}},"
                     " s:[{s:s, s:s, s:{s:{s:s}}}]}, s:{s:s}}",
                     "metadata", "name", name, "namespace", "default", "uid", name, "spec",
                     "nodeName", node, "affinity", "podAntiAffinity",
                     "preferredDuringSchedulingIgnoredDuringExecution", "weight", 100,
                     "podAffinityTerm", "topologyKey", HOST, "labelSelector", "matchLabels",
                     "app", "web", "containers", "name", "c", "image", "x", "resources",
                     "requests", "cpu", "100m", "status", "phase", "Running");
}

/* The pod's /filter and /prioritize; its bind to node `to` is not timed. */
static double ask(struct ext_sched *s, json_t *names, const char *uid, const char *app,
                  const char *ns, const char *to)
{
    json_t *args = json_pack("{s:o, s:O}", "Pod", gpu_pod(uid, app, ns), "NodeNames", names);
    char *body = json_dumps(args, JSON_COMPACT);
    struct ext_reply rep;
    size_t len;
    char bind[256];
    double t0 = bench_now();
    ext_sched_filter(s, body, strlen(body), &rep);
    free(ext_reply_take(&rep, &len));
    ext_sched_prioritize(s, body, strlen(body), &rep);
    free(ext_reply_take(&rep, &len));
    double t = bench_now() - t0;
    snprintf(bind, sizeof bind, "{\"PodName\":\"%s\",\"PodNamespace\":\"%s\","
             "\"PodUID\":\"%s\",\"Node\":\"%s\"}", uid, ns, uid, to);
    ext_sched_bind(s, bind, strlen(bind), &rep);
    free(ext_reply_take(&rep, &len));
    free(body);
    json_decref(args);
    return t;
}

/* The median over rounds of the mean time of `reps` new pods, in µs. */
static double time_pods(struct ext_sched *s, json_t *names, const char *app, const char *ns,
                        int rounds)
{
    static int seq;
    double t[64];
    int reps = 20;
    for (int r = 0; r < rounds; r++) {
        double sum = 0;
        for (int k = 0; k < reps; k++, seq++) {
            char uid[32];
            snprintf(uid, sizeof uid, "asked-%d", seq);
            sum += ask(s, names, uid, app, ns, json_string_value(json_array_get(
                                               names, (size_t)seq % json_array_size(names))));
        }
        t[r] = sum * 1e6 / reps;
    }
    return bench_median(t, rounds);
}

int main(int argc, char **argv)
{
    int nodes = argc > 1 ? atoi(argv[1]) : 1000, rounds = argc > 2 ? atoi(argv[2]) : 7;
    struct gs_err e = GS_ERR_INIT;
    struct ext_sched *s;
    log_set_level(LOG_ERROR);
    if (nodes < 10 || rounds < 1 || rounds > 64 ||
        ext_sched_new(&(struct ext_sched_opts){.max_pods = 100000}, &s, &e) < 0) {
        fprintf(stderr, "usage: bench_podaff [NODES>=10 [ROUNDS<=64]] %s\n", e.msg);
        return 2;
    }
    json_t *nl = json_array(), *names = json_array();
    for (int i = 0; i < nodes; i++) {
        json_t *n = bench_node_obj(i), *meta = json_object_get(n, "metadata");
        json_object_set(json_object_get(meta, "labels"), HOST, json_object_get(meta, "name"));
        json_array_append(names, json_object_get(meta, "name"));
        json_array_append_new(nl, n);
    }
    if (ext_sched_replace_nodes(s, nl) != 0) {
        fprintf(stderr, "nodes refused\n");
        return 1;
    }
    printf("%d nodes of 8 GPUs; each pod new, /filter + /prioritize over all nodes, "
           "median of %d rounds of 20 pods (us per pod)\n", nodes, rounds);
    printf("%8s %12s %12s %16s\n", "owners", "app=web", "app=batch", "app=web, ns b");
    int done = 0;
    for (int k = 0; k <= 10000; k = k ? k * 10 : 100) {
        for (; done < k; done++) {
            char name[32];
            snprintf(name, sizeof name, "owner-%05d", done);
            json_t *p = owner(name, json_string_value(json_array_get(names,
                                                                     (size_t)(done % nodes))));
            ext_sched_observe_pod(s, p, 0);
            json_decref(p);
        }
        time_pods(s, names, "web", "default", 1); /* warm */
        double web = time_pods(s, names, "web", "default", rounds);
        double batch = time_pods(s, names, "batch", "default", rounds);
        double other = time_pods(s, names, "web", "b", rounds);
        printf("%8d %12.1f %12.1f %16.1f\n", k, web, batch, other);
    }
    json_decref(nl);
    json_decref(names);
    ext_sched_free(s);
    return 0;
}
