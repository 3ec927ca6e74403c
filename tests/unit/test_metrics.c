/* tests/unit/test_metrics.c - the Prometheus registry: types, labels,
 * escaping, histogram buckets, collect callbacks and bad registrations. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"
#include "util/metrics.h"

static void collect(void *ud, struct metrics *m)
{
    struct metric *g = ud;
    (void)m;
    metric_reset(g);
    metric_set(g, (const char *[]){"n1"}, 7);
}

/* A collect that takes a while between its reset and its set. */
static void slow_collect(void *ud, struct metrics *m)
{
    struct metric *g = ud;
    (void)m;
    metric_reset(g);
    nanosleep(&(struct timespec){0, 200000}, NULL);
    metric_set(g, (const char *[]){"n1"}, 7);
}

static void *scrape(void *arg)
{
    long missing = 0;
    for (int i = 0; i < 200; i++) {
        size_t len;
        char *text = metrics_render(arg, &len);
        missing += !strstr(text, "gpus_free{node=\"n1\"} 7");
        free(text);
    }
    return (void *)missing;
}

/* Two scrapes at once (two Prometheus replicas): neither prints the gauges
 * the other's collect has just reset. */
static void test_concurrent_scrapes(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct metrics *m = metrics_new();
    struct metric *g = metrics_add(m, METRIC_GAUGE, "gpus_free", "Free GPUs.", "node", NULL, 0,
                                   &e);
    ASSERT_TRUE(g != NULL);
    metrics_on_collect(m, slow_collect, g);
    pthread_t t[2];
    void *missing[2];
    for (int i = 0; i < 2; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, scrape, m), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], &missing[i]);
    ASSERT_EQ((long)missing[0] + (long)missing[1], 0);
    metrics_free(m);
}

int test_metrics(void)
{
    struct gs_err e = GS_ERR_INIT;
    struct metrics *m = metrics_new();
    double b[3];
    size_t len;

    metrics_exp_buckets(0.001, 10, 3, b);
    ASSERT_NEAR(b[2], 0.1, 1e-12);

    struct metric *c = metrics_add(m, METRIC_COUNTER, "req_total", "Requests.\nby verb",
                                   "verb,code", NULL, 0, &e);
    struct metric *h = metrics_add(m, METRIC_HISTOGRAM, "lat_seconds", "Latency", "verb", b, 3, &e);
    struct metric *g = metrics_add(m, METRIC_GAUGE, "free", "Free GPUs", "node", NULL, 0, &e);
    struct metric *u = metrics_add(m, METRIC_GAUGE, "up", "Up", NULL, NULL, 0, &e);
    ASSERT_TRUE(c && h && g && u);

    metric_inc(c, (const char *[]){"filter", "200"});
    metric_add(c, (const char *[]){"filter", "200"}, 2);
    metric_add(c, (const char *[]){"filter", "200"}, -5); /* ignored: counters only grow */
    metric_inc(c, (const char *[]){"bi\"nd\\", "500"});
    ASSERT_NEAR(metric_value(c, (const char *[]){"filter", "200"}), 3, 0);
    ASSERT_NEAR(metric_value(c, (const char *[]){"nope", "200"}), 0, 0);

    metric_observe(h, (const char *[]){"filter"}, 0.0005);
    metric_observe(h, (const char *[]){"filter"}, 0.01);
    metric_observe(h, (const char *[]){"filter"}, 5);
    ASSERT_NEAR(metric_value(h, (const char *[]){"filter"}), 3, 0);
    metric_set(u, NULL, 1);
    metric_set(g, (const char *[]){"stale"}, 1);
    metrics_on_collect(m, collect, g);

    char *txt = metrics_render(m, &len);
    ASSERT_EQ(len, strlen(txt));
    ASSERT_CONTAINS(txt, "# HELP req_total Requests.\\nby verb\n# TYPE req_total counter\n");
    ASSERT_CONTAINS(txt, "req_total{verb=\"filter\",code=\"200\"} 3\n");
    ASSERT_CONTAINS(txt, "req_total{verb=\"bi\\\"nd\\\\\",code=\"500\"} 1\n");
    ASSERT_CONTAINS(txt, "# TYPE lat_seconds histogram\n");
    ASSERT_CONTAINS(txt, "lat_seconds_bucket{verb=\"filter\",le=\"0.001\"} 1\n");
    ASSERT_CONTAINS(txt, "lat_seconds_bucket{verb=\"filter\",le=\"0.01\"} 2\n");
    ASSERT_CONTAINS(txt, "lat_seconds_bucket{verb=\"filter\",le=\"0.1\"} 2\n");
    ASSERT_CONTAINS(txt, "lat_seconds_bucket{verb=\"filter\",le=\"+Inf\"} 3\n");
    ASSERT_CONTAINS(txt, "lat_seconds_sum{verb=\"filter\"} 5.0105");
    ASSERT_CONTAINS(txt, "lat_seconds_count{verb=\"filter\"} 3\n");
    ASSERT_CONTAINS(txt, "free{node=\"n1\"} 7\n");
    ASSERT_TRUE(strstr(txt, "stale") == NULL);
    ASSERT_CONTAINS(txt, "\nup 1\n");
    free(txt);

    ASSERT_TRUE(metrics_add(m, METRIC_GAUGE, "up", "dup", NULL, NULL, 0, &e) == NULL);
    ASSERT_CONTAINS(e.msg, "registered twice");
    ASSERT_TRUE(metrics_add(m, METRIC_GAUGE, "9bad", "", NULL, NULL, 0, &e) == NULL);
    ASSERT_CONTAINS(e.msg, "9bad");
    ASSERT_TRUE(metrics_add(m, METRIC_GAUGE, "x", "", "a,b-c", NULL, 0, &e) == NULL);
    ASSERT_CONTAINS(e.msg, "b-c");
    ASSERT_TRUE(metrics_add(m, METRIC_HISTOGRAM, "y", "", "le", b, 3, &e) == NULL);
    ASSERT_TRUE(metrics_add(m, METRIC_HISTOGRAM, "z", "", NULL, (double[]){2, 1}, 2, &e) == NULL);
    ASSERT_CONTAINS(e.msg, "ascending");
    ASSERT_TRUE(metrics_add(m, METRIC_GAUGE, "w", "", "a,b,c,d,e", NULL, 0, &e) == NULL);
    /* many label sets: each one found again, and reset empties the index */
    struct metric *many = metrics_add(m, METRIC_GAUGE, "many", "", "node,model", NULL, 0, &e);
    char node[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(node, sizeof node, "node-%05d", i);
        metric_set(many, (const char *[]){node, "A100"}, i);
    }
    ASSERT_NEAR(metric_value(many, (const char *[]){"node-04321", "A100"}), 4321, 0);
    ASSERT_NEAR(metric_value(many, (const char *[]){"node-0432", "1A100"}), 0, 0);
    metric_reset(many);
    ASSERT_NEAR(metric_value(many, (const char *[]){"node-04321", "A100"}), 0, 0);
    metric_set(many, (const char *[]){"x", "y"}, 2);
    ASSERT_NEAR(metric_value(many, (const char *[]){"x", "y"}), 2, 0);
    metrics_free(m);
    test_concurrent_scrapes();
    return test_failures;
}
