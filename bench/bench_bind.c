/*
 * bench/bench_bind.c - standalone /bind throughput and latency under
 * several connections: what the journal's disk flush costs per pod.
 *
 * bench_sched_loop sends one pod at a time, so its /bind never overlaps
 * another; kube-scheduler binds in goroutines, several at once. Here every
 * pod is first shown to the extender through /filter (one node name, not
 * timed: a standalone /bind needs a pod its /filter saw), then CONNS
 * threads, each with its own keep-alive connection, bind the pods as fast
 * as the answers come, each a new pod taking one GPU on its own node.
 * Prints binds per second, the /bind round trip's p50/p99 and, when the
 * extender exposes gpusched_extender_journal_flushes_total, the journal's
 * disk flushes per bind (1 without group commit).
 *
 * usage: bench_bind URL NODES PODS CONNS
 *   URL    a standalone extender (--state-dir on the disk to measure) whose
 *          nodes file bench/extender_gen.py wrote (node-00000 ... 8 GPUs each)
 *   NODES  the number of nodes in that file; PODS <= NODES * 8
 * bench/extender-bind.sh starts the extender and runs this.
 */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/buf.h"
#include "bench_util.h"

struct run {
    const char *url;
    int nodes, pods;
    int next;       /* the next pod to bind, under mu */
    int failed;
    double *lat;    /* per pod, seconds */
    pthread_mutex_t mu;
};

static CURL *client(struct curl_slist *hdr)
{
    CURL *c = curl_easy_init();
    if (c) {
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdr);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, bench_on_data);
        curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
    }
    return c;
}

/* POSTs body (GET when NULL) to URL/path; the reply in *out (when out is
 * not NULL). 0 on HTTP 200 with a reply whose "Error" is empty or absent. */
static int call(CURL *c, const char *url, const char *path, const char *body, struct gs_buf *out)
{
    char full[512];
    struct gs_buf reply = {0};
    long status = 0;
    snprintf(full, sizeof full, "%s/%s", url, path);
    curl_easy_setopt(c, CURLOPT_URL, full);
    if (body) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else {
        curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
    }
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &reply);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    int ok = rc == CURLE_OK && status == 200 && reply.buf && !reply.oom &&
             (!body || !strstr(reply.buf, "\"Error\":\"") || strstr(reply.buf, "\"Error\":\"\""));
    if (!ok)
        fprintf(stderr, "bench_bind: /%s: %s, HTTP %ld: %.300s\n", path, curl_easy_strerror(rc),
                status, reply.buf ? reply.buf : "");
    if (ok && out)
        *out = reply;
    else
        gs_buf_free(&reply);
    return ok ? 0 : -1;
}

/* The journal's flush counter from /metrics, or -1 when there is none. */
static double flushes(CURL *c, const char *url)
{
    struct gs_buf m = {0};
    const char *key = "\ngpusched_extender_journal_flushes_total ";
    double v = -1;
    if (call(c, url, "metrics", NULL, &m) == 0) {
        const char *p = strstr(m.buf, key);
        if (p)
            v = strtod(p + strlen(key), NULL);
    }
    gs_buf_free(&m);
    return v;
}

static void *binder(void *ud)
{
    struct run *r = ud;
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *c = client(hdr);
    char body[256];
    for (;;) {
        pthread_mutex_lock(&r->mu);
        int i = r->failed || !c ? r->pods : r->next++;
        pthread_mutex_unlock(&r->mu);
        if (i >= r->pods)
            break;
        snprintf(body, sizeof body, "{\"PodName\":\"bind-%d\",\"PodNamespace\":\"default\","
                 "\"PodUID\":\"bind-uid-%d\",\"Node\":\"node-%05d\"}", i, i, i / 8);
        double t0 = bench_now();
        int rc = call(c, r->url, "bind", body, NULL);
        r->lat[i] = bench_now() - t0;
        if (rc < 0) {
            pthread_mutex_lock(&r->mu);
            r->failed = 1;
            pthread_mutex_unlock(&r->mu);
        }
    }
    if (!c) {
        pthread_mutex_lock(&r->mu);
        r->failed = 1;
        pthread_mutex_unlock(&r->mu);
    }
    curl_easy_cleanup(c);
    curl_slist_free_all(hdr);
    return NULL;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: bench_bind URL NODES PODS CONNS\n");
        return 2;
    }
    struct run r = {.url = argv[1], .nodes = atoi(argv[2]), .pods = atoi(argv[3])};
    int conns = atoi(argv[4]), status = 0;
    if (r.nodes <= 0 || r.pods <= 0 || r.pods > r.nodes * 8 || conns <= 0 || conns > 256) {
        fprintf(stderr, "bench_bind: need NODES > 0, 0 < PODS <= NODES * 8, 0 < CONNS <= 256\n");
        return 2;
    }
    pthread_t *th = calloc((size_t)conns, sizeof *th);
    r.lat = calloc((size_t)r.pods, sizeof *r.lat);
    pthread_mutex_init(&r.mu, NULL);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct curl_slist *hdr = curl_slist_append(NULL, "Content-Type: application/json");
    CURL *c = client(hdr);
    if (!th || !r.lat || !c || !hdr) {
        fprintf(stderr, "bench_bind: out of memory\n");
        status = 2;
        goto out;
    }
    /* show every pod to the extender: a standalone /bind needs its /filter */
    for (int i = 0; i < r.pods && status == 0; i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "{\"Pod\":{\"metadata\":{\"name\":\"bind-%d\",\"namespace\":\"default\","
                 "\"uid\":\"bind-uid-%d\"},\"spec\":{\"containers\":[{\"name\":\"c\","
                 "\"resources\":{\"limits\":{\"nvidia.com/gpu\":\"1\"}}}]}},"
                 "\"NodeNames\":[\"node-%05d\"],\"Nodes\":null}", i, i, i / 8);
        if (call(c, r.url, "filter", body, NULL) < 0)
            status = 1;
    }
    double f0 = flushes(c, r.url), t0 = bench_now();
    int started = 0;
    for (int k = 0; k < conns && status == 0; k++, started++)
        if (pthread_create(&th[k], NULL, binder, &r) != 0) {
            fprintf(stderr, "bench_bind: cannot start a thread\n");
            status = 1;
        }
    for (int k = 0; k < started; k++)
        pthread_join(th[k], NULL);
    double wall = bench_now() - t0, f1 = flushes(c, r.url);
    if (status == 0 && r.failed)
        status = 1;
    if (status == 0) {
        qsort(r.lat, (size_t)r.pods, sizeof *r.lat, by_value);
        printf("%5d %6d %10.0f %9.3f %9.3f", conns, r.pods, r.pods / wall,
               r.lat[(r.pods - 1) / 2] * 1e3, r.lat[(int)(0.99 * (r.pods - 1) + 0.5)] * 1e3);
        if (f0 >= 0 && f1 >= 0)
            printf(" %11.3f\n", (f1 - f0) / r.pods);
        else
            printf(" %11s\n", "-");
    }
out:
    curl_easy_cleanup(c);
    curl_slist_free_all(hdr);
    curl_global_cleanup();
    pthread_mutex_destroy(&r.mu);
    free(r.lat);
    free(th);
    return status;
}
