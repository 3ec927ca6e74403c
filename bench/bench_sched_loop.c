/*
 * bench/bench_sched_loop.c - the extender as kube-scheduler drives it: pod
 * after pod, /filter, then /prioritize on the nodes that passed, then /bind
 * to the best-scored node, over one keep-alive HTTP connection.
 *
 * extender-wrk.sh asks the same question again and again with nothing
 * changing in between; here every pod is new and every bind changes a node
 * before the next pod is asked about, so what the extender keeps between
 * requests (ext/memo.h) helps only as far as it does in a real cluster.
 * Pods come in seven shapes in turn (whole GPUs, shared by memory and
 * compute, a GPU model by annotation). Prints each verb's round trip (p50,
 * p99), /filter + /prioritize per pod (what kube-scheduler's scheduling
 * cycle waits on), their sum with /bind per pod, and, in the same run, the
 * transport ceiling: each /filter body POSTed again to /unknown (404, no
 * work). A second table leaves out the first pod of each shape: the
 * extender's cold start, when every node is decided once for that shape
 * (a running cluster pays it once per shape, not once per 100 pods, which
 * is where it lands in the p99 of a 700-pod run). This client's own JSON work (building the
 * 70-140 KB requests, decoding the replies with jansson: several ms a pod at
 * 5,000 nodes) is left out of those figures; kube-scheduler does the same
 * work in Go, and it is not the extender's.
 *
 * With BENCH_POD_TERMS=1 in the environment every pod carries its shape's
 * app label and prefers, by weight-100 preferred pod anti-affinity on the
 * hostname, nodes without that app's pods: the extender counts the GPU pods
 * placed for each decision (ext/sched_podaff.c) and keeps no reply.
 *
 * usage: bench_sched_loop URL FILTER.json PODS
 *   URL          the extender, e.g. http://127.0.0.1:8888
 *   FILTER.json  ExtenderArgs with a pod named "bench" (UID "bench-uid") and
 *                the NodeNames to ask about (bench/extender_gen.py writes it)
 * bench/extender-loop.sh starts a standalone extender and runs this.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/buf.h"
#include "bench_util.h"

enum { V_FILTER, V_PRIORITIZE, V_BIND, V_404, V_N, V_FP = V_N, V_POD, V_ALL };
static const char *const verb_names[V_ALL] = {"/filter", "/prioritize", "/bind", "404 (same)",
                                              "filter+prio", "per pod"};

/* The pod shapes sent in turn: whole GPUs, shared GPUs by memory and
 * compute, and a GPU model asked for by annotation (the generator's nodes
 * carry four models). */
struct shape {
    const char *gpus, *mem, *cores, *type;
};
static const struct shape shapes[] = {
    {"1", NULL, NULL, NULL},      {"2", NULL, NULL, NULL},
    {"4", NULL, NULL, NULL},      {"1", "8Gi", NULL, NULL},
    {"1", "16Gi", "50", NULL},    {"1", NULL, NULL, "A100"},
    {"2", "20Gi", "30", "H100"},
};
enum { N_SHAPES = sizeof shapes / sizeof shapes[0] };

/* Sets pod's GPU limits and gpu-type annotation to shape s (with
 * BENCH_POD_TERMS, its app label and anti-affinity to that app). */
static void set_shape(json_t *pod, const struct shape *s, int idx)
{
    json_t *md = json_object_get(pod, "metadata");
    const char *terms = getenv("BENCH_POD_TERMS");
    if (terms && *terms == '1') {
        char app[16];
        snprintf(app, sizeof app, "shape-%d", idx);
        json_object_set_new(md, "labels", json_pack("{s:s}", "app", app));
        json_object_set_new(
            json_object_get(pod, "spec"), "affinity",
            json_pack("{s:{s:[{s:i, s:{s:s, s:{s:{s:s}}}}]}}", "podAntiAffinity",
                      "preferredDuringSchedulingIgnoredDuringExecution", "weight", 100,
                      "podAffinityTerm", "topologyKey", "kubernetes.io/hostname",
                      "labelSelector", "matchLabels", "app", app));
    }
    json_t *c0 = json_array_get(json_object_get(json_object_get(pod, "spec"), "containers"), 0);
    json_t *lim = json_object();
    json_object_set_new(lim, "nvidia.com/gpu", json_string(s->gpus));
    if (s->mem)
        json_object_set_new(lim, "nvidia.com/gpu-memory", json_string(s->mem));
    if (s->cores)
        json_object_set_new(lim, "nvidia.com/gpu-cores", json_string(s->cores));
    json_object_set_new(c0, "resources", json_pack("{s:o}", "limits", lim));
    if (s->type)
        json_object_set_new(md, "annotations", json_pack("{s:s}", "gpusched.io/gpu-type", s->type));
    else
        json_object_del(md, "annotations");
}

/* POSTs body to URL/verb; the reply parsed into *out. Adds the round trip
 * to *secs. 0, or -1 with a message printed. */
static int post(CURL *c, const char *url, const char *verb, const char *body, json_t **out,
                double *secs, long want)
{
    char full[512];
    struct gs_buf reply = {0};
    long status = 0;
    snprintf(full, sizeof full, "%s/%s", url, verb);
    curl_easy_setopt(c, CURLOPT_URL, full);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bench_on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply);
    double t0 = bench_now();
    CURLcode rc = curl_easy_perform(c);
    *secs = bench_now() - t0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc == CURLE_OK && status == want && want != 200) {
        gs_buf_free(&reply);
        return 0;
    }
    if (rc != CURLE_OK || status != 200 || !reply.buf) {
        fprintf(stderr, "bench_sched_loop: /%s: %s, HTTP %ld: %.200s\n", verb,
                curl_easy_strerror(rc), status, reply.buf ? reply.buf : "");
        gs_buf_free(&reply);
        return -1;
    }
    json_error_t je;
    *out = json_loadb(reply.buf, reply.len, 0, &je);
    gs_buf_free(&reply);
    if (!*out) {
        fprintf(stderr, "bench_sched_loop: /%s: reply is not JSON: %s\n", verb, je.text);
        return -1;
    }
    return 0;
}

/* POSTs the request object req (which it frees) to URL/verb, as post(). */
static int ask(CURL *c, const char *url, const char *verb, json_t *req, json_t **out,
               double *secs, double *secs404)
{
    char *body = req ? json_dumps(req, JSON_COMPACT) : NULL;
    json_decref(req);
    if (!body) {
        fprintf(stderr, "bench_sched_loop: /%s: out of memory\n", verb);
        return -1;
    }
    int rc = post(c, url, verb, body, out, secs, 200);
    if (rc == 0 && secs404) /* the same body to a path the server does not have */
        rc = post(c, url, "unknown", body, NULL, secs404, 404);
    free(body);
    return rc;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p)
{
    int i = (int)(p * (n - 1) + 0.5);
    return n ? v[i] : 0;
}

/* One pod through filter, prioritize and bind; its round trips in t[]. 1 when
 * bound, 0 when it fits nowhere, -1 on error. */
static int place(CURL *c, const char *url, json_t *pod, json_t *names, double t[V_N])
{
    json_t *f = NULL, *pr = NULL, *b = NULL;
    int rc = -1;

    if (ask(c, url, "filter", json_pack("{s:O, s:O, s:n}", "Pod", pod, "NodeNames", names, "Nodes"),
            &f, &t[V_FILTER], &t[V_404]) < 0)
        goto out;
    json_t *fit = json_object_get(f, "NodeNames");
    if (!json_is_array(fit) || json_array_size(fit) == 0) {
        rc = 0;
        goto out;
    }
    if (ask(c, url, "prioritize", json_pack("{s:O, s:O, s:n}", "Pod", pod, "NodeNames", fit,
                                             "Nodes"), &pr, &t[V_PRIORITIZE], NULL) < 0)
        goto out;
    const char *best = NULL;
    json_int_t top = -1;
    size_t i;
    json_t *h;
    json_array_foreach(pr, i, h) {
        json_int_t s = json_integer_value(json_object_get(h, "Score"));
        if (s > top) {
            top = s;
            best = json_string_value(json_object_get(h, "Host"));
        }
    }
    if (!best) {
        fprintf(stderr, "bench_sched_loop: /prioritize scored no node\n");
        goto out;
    }
    json_t *md = json_object_get(pod, "metadata");
    if (ask(c, url, "bind", json_pack("{s:O, s:s, s:O, s:s}", "PodName", json_object_get(md, "name"),
                                       "PodNamespace", "default", "PodUID",
                                       json_object_get(md, "uid"), "Node", best),
            &b, &t[V_BIND], NULL) < 0)
        goto out;
    const char *err = json_string_value(json_object_get(b, "Error"));
    if (err && *err) {
        fprintf(stderr, "bench_sched_loop: /bind to %s: %s\n", best, err);
        goto out;
    }
    rc = 1;
out:
    json_decref(f);
    json_decref(pr);
    json_decref(b);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: bench_sched_loop URL FILTER.json PODS\n");
        return 2;
    }
    const char *url = argv[1];
    int pods = atoi(argv[3]);
    json_error_t je;
    json_t *args = json_load_file(argv[2], 0, &je);
    json_t *pod = json_object_get(args, "Pod"), *names = json_object_get(args, "NodeNames");
    if (!args || !json_is_object(pod) || !json_is_array(names) || pods <= 0) {
        fprintf(stderr, "bench_sched_loop: %s: %s\n", argv[2],
                args ? "needs a Pod, NodeNames and PODS > 0" : je.text);
        json_decref(args);
        return 2;
    }
    double *lat[V_ALL], *warm[V_ALL]; /* all pods; all but each shape's first */
    int oom = 0;
    for (int v = 0; v < V_ALL; v++) {
        oom |= !(lat[v] = calloc((size_t)pods, sizeof *lat[v]));
        oom |= !(warm[v] = calloc((size_t)pods, sizeof *warm[v]));
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    CURL *c = curl_easy_init();
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
    int placed = 0, unfit = 0, status = 0, n[V_ALL] = {0}, nw[V_ALL] = {0};
    double busy = 0; /* the extender's time: all round trips */
    double t0 = bench_now();
    for (int i = 0; i < pods && !oom; i++) {
        char name[64], uid[64];
        double t[V_N] = {0};
        snprintf(name, sizeof name, "bench-%d", i);
        snprintf(uid, sizeof uid, "bench-uid-%d", i);
        json_t *md = json_object_get(pod, "metadata");
        json_object_set_new(md, "name", json_string(name));
        json_object_set_new(md, "uid", json_string(uid));
        set_shape(pod, &shapes[i % N_SHAPES], i % N_SHAPES);
        int rc = place(c, url, pod, names, t);
        if (rc < 0) {
            status = 1;
            break;
        }
        placed += rc;
        unfit += !rc;
        double sum = 0, all[V_ALL] = {0};
        for (int v = 0; v < V_N; v++) {
            all[v] = t[v];
            sum += v == V_404 ? 0 : t[v];
        }
        all[V_FP] = t[V_PRIORITIZE] > 0 ? t[V_FILTER] + t[V_PRIORITIZE] : 0;
        all[V_POD] = sum;
        for (int v = 0; v < V_ALL; v++)
            if (all[v] > 0) {
                lat[v][n[v]++] = all[v];
                if (i >= N_SHAPES)
                    warm[v][nw[v]++] = all[v];
            }
        busy += sum;
    }
    double wall = bench_now() - t0;
    printf("%d pods (%d placed, %d fit nowhere) in %.2f s, %.2f s of it in the extender's "
           "round trips: %.0f placements/s of extender time\n", placed + unfit, placed, unfit, wall,
           busy, busy > 0 ? placed / busy : 0);
    printf("%-11s %8s %9s %9s\n", "verb", "calls", "p50", "p99");
    for (int v = 0; v < V_ALL && !oom; v++) {
        qsort(lat[v], (size_t)n[v], sizeof *lat[v], by_value);
        printf("%-11s %8d %7.3f ms %7.3f ms\n", verb_names[v], n[v],
               pct(lat[v], n[v], 0.5) * 1e3, pct(lat[v], n[v], 0.99) * 1e3);
    }
    printf("without the first pod of each shape (the extender's cold start):\n");
    for (int v = 0; v < V_ALL && !oom; v++) {
        qsort(warm[v], (size_t)nw[v], sizeof *warm[v], by_value);
        printf("%-11s %8d %7.3f ms %7.3f ms\n", verb_names[v], nw[v],
               pct(warm[v], nw[v], 0.5) * 1e3, pct(warm[v], nw[v], 0.99) * 1e3);
    }
    for (int v = 0; v < V_ALL; v++) {
        free(lat[v]);
        free(warm[v]);
    }
    curl_slist_free_all(hdr);
    curl_easy_cleanup(c);
    curl_global_cleanup();
    json_decref(args);
    return status;
}
